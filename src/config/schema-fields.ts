// The field types every section of the configuration schema shares (ports, counts, credits,
// method names and globs): one definition, so a method name means the same thing in every section.
import { z } from 'zod';

export const port = z.number().int().min(0).max(65535);
export const positiveInt = z.number().int().positive();
export const credits = z.number().int().min(0);

/** A JSON-RPC method name as it appears on the wire. */
export const methodName = z.string().regex(/^[A-Za-z][A-Za-z0-9_]*$/, 'a JSON-RPC method name');
/** A method name or a glob of them: `*` matches any run of characters (`debug_*`). */
export const methodGlob = z.string().regex(/^[A-Za-z0-9_*]+$/, 'a JSON-RPC method name or a glob such as debug_*');
