import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { configSchema, type GatewayConfig } from './schema.js';

/** Thrown for any config problem; the message names the file and the offending paths. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

const ENV_PLACEHOLDER = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/**
 * Replaces `${NAME}` in every string of the parsed YAML with the environment variable's value.
 * An unset variable is an error naming the path, so a missing provider key fails start-up
 * instead of producing a URL with an empty credential.
 */
function expandEnv(value: unknown, env: NodeJS.ProcessEnv, path: string[], missing: string[]): unknown {
  if (typeof value === 'string') {
    return value.replace(ENV_PLACEHOLDER, (_match, name: string) => {
      const replacement = env[name];
      if (replacement === undefined) {
        missing.push(`${path.join('.') || '(root)'}: environment variable ${name} is not set`);
        return '';
      }
      return replacement;
    });
  }
  if (Array.isArray(value)) return value.map((item, index) => expandEnv(item, env, [...path, String(index)], missing));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([key, item]) => [key, expandEnv(item, env, [...path, key], missing)]),
    );
  }
  return value;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const item of Object.values(value)) deepFreeze(item);
  }
  return value;
}

function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((issue) => {
      const path = issue.path.length > 0 ? issue.path.join('.') : '(root)';
      if (issue.code === 'unrecognized_keys') {
        return issue.keys.map((key) => `${path === '(root)' ? '' : `${path}.`}${key}: unknown key`).join('\n  ');
      }
      return `${path}: ${issue.message}`;
    })
    .join('\n  ');
}

/** Validates an already-parsed config object (YAML or built in code) and freezes it. */
export function parseConfig(raw: unknown, env: NodeJS.ProcessEnv = process.env, source = 'config'): GatewayConfig {
  const missing: string[] = [];
  const expanded = expandEnv(raw ?? {}, env, [], missing);
  if (missing.length > 0) throw new ConfigError(`${source} is invalid:\n  ${missing.join('\n  ')}`);
  const result = configSchema.safeParse(expanded);
  if (!result.success) throw new ConfigError(`${source} is invalid:\n  ${describeIssues(result.error)}`);
  return deepFreeze(result.data);
}

/** Reads, expands, validates and freezes a YAML config file. */
export function loadConfigFile(path: string, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(`cannot read config file ${path}: ${(error as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    // Only the first line ("… at line 3, column 10"): the rest quotes the file, which may hold a
    // literal secret, and this message is logged when a reload is rejected.
    const summary = (error as Error).message.split('\n', 1)[0]!.replace(/:$/, '');
    throw new ConfigError(`${path} is not valid YAML: ${summary}`);
  }
  return parseConfig(raw, env, path);
}
