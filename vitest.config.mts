import { defineConfig } from "vitest/config";
import * as path from "node:path";

export default defineConfig({
  resolve: {
    // Tests import the package by its name, as users do; resolve it to the sources.
    alias: { moelens: path.resolve(import.meta.dirname, "sdk/index.ts") },
  },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: "forks",
  },
});
