// @ts-check
import eslint from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'compat/**', 'coverage/**', '.stryker-tmp/**', 'reports/**', '**/*.js', '**/*.mjs', '!lib/admin/page/*.js'] },
  eslint.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // As the compiler's noUnusedParameters: a leading underscore marks a parameter kept for its position.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  // The admin page's script: browser JavaScript run as written, type-checked by tsconfig.admin-page.json.
  {
    files: ['lib/admin/page/*.js'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: { ...tseslint.configs.disableTypeChecked.languageOptions, sourceType: 'module', ecmaVersion: 2022 },
    rules: { ...tseslint.configs.disableTypeChecked.rules, 'no-undef': 'off' },
  },
);
