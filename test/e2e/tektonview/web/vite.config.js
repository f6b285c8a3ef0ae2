// The page is built with vite from the npm registry (test/e2e/dashboards.sh
// build_tekton_view); the components are JSX and Sass, as in the dashboard.
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react-swc';

export default defineConfig({
  base: './',
  build: { assetsDir: '.', outDir: 'dist', target: 'es2022', sourcemap: false, chunkSizeWarningLimit: 8000 },
  css: { preprocessorOptions: { scss: { quietDeps: true, silenceDeprecations: ['import', 'global-builtin'] } } },
  plugins: [react()],
  resolve: { extensions: ['.js', '.jsx'] }
});
