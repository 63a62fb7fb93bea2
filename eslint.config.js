// Lint rules: typescript-eslint's recommended set, plus the habits of STYLE.md that a linter can see.
import js from '@eslint/js'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['node_modules/**', 'stubs/**', 'data/**', 'dashboard/dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname }
    },
    rules: {
      // node:test's test() and describe() return promises the runner itself awaits.
      '@typescript-eslint/no-floating-promises': ['error', { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] }] }],
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', caughtErrors: 'none' }],
      'no-empty': ['error', { allowEmptyCatch: false }]
    }
  },
  {
    // The composition root builds every part in one order: a part is used only after the line that builds it, in
    // closures too (a callback that names a later part works only by the accident of when it is first called).
    files: ['src/node.ts'],
    rules: { 'no-use-before-define': ['error', { functions: false, classes: true, variables: true }] }
  },
  {
    files: ['**/*.js'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: { parserOptions: { projectService: false }, globals: { process: 'readonly', URL: 'readonly', console: 'readonly' } }
  }
)
