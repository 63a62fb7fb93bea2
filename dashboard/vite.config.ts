// Builds the dashboard (issue 16) into dashboard/dist, which the node serves at `/`. Preact's JSX through esbuild's
// own transform: no framework plugin, so the build needs nothing beyond vite and preact.
import { fileURLToPath } from 'node:url'
import { defineConfig } from 'vite'

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/',
  logLevel: 'warn',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    // Nothing inlined into index.html: the page's CSP allows scripts and styles from the node's own files only
    assetsInlineLimit: 0,
    reportCompressedSize: false
  }
})
