/**
 * Import rules checked by `npm run lint` (dependency-cruiser). Type-only imports count: a cycle of
 * types still ties the modules together (neither can be understood, moved or tested alone).
 */
export default {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'Modules must not import each other in a circle: put the shared type where its domain is, and shared matchers in a leaf module.',
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.test.json' },
  },
};
