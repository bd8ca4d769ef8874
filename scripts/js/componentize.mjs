// Builds one JavaScript plugin folder into a component of worker:plugin/handler@2.0.0: bundles
// app.js with its imports (the `worker` SDK, npm packages) into one module with esbuild, then
// componentize-js's componentize() makes the component. Run by scripts/build-js.sh, which installs
// the tools (package.json here) into --tools and the plugin's own packages into its folder.
//
//   node componentize.mjs --tools DIR --wit FILE --stage DIR PLUGIN_DIR OUT.wasm
//
// Skips the componentize step (seconds) when the bundle, the WIT, the tools' lock and this script
// are those of the last build (hash kept in STAGE/<plugin>/): componentize-js's output differs
// from build to build (its snapshot holds temporary paths and engine state), so this hash, not a
// byte comparison, is what spares the host's watcher a reload. OUT is replaced with a rename.
import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import { existsSync, statSync } from "node:fs";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

// The component imports only what the host offers: fetch() through wasi:http/outgoing-handler
// (the host decides every request against the subscription's allowed_hosts), but no incoming-HTTP
// handler. stdio (console.log becomes a host log line), clocks and random stay on.
const DISABLED_FEATURES = ["fetch-event"];
const WORLD = "handler";

const { values: opt, positionals } = parseArgs({
  options: {
    tools: { type: "string" },
    wit: { type: "string" },
    stage: { type: "string" },
  },
  allowPositionals: true,
});
if (!opt.tools || !opt.wit || !opt.stage || positionals.length !== 2) {
  console.error("usage: node componentize.mjs --tools DIR --wit FILE --stage DIR PLUGIN_DIR OUT.wasm");
  process.exit(2);
}
const pluginDir = resolve(positionals[0]);
const out = resolve(positionals[1]);
const witPath = resolve(opt.wit);
const name = basename(pluginDir);
const stage = resolve(opt.stage, name);
const started = performance.now();

const tools = createRequire(join(resolve(opt.tools), "package.json"));
const esbuild = tools("esbuild");

await mkdir(stage, { recursive: true });
const bundlePath = join(stage, `${name}.js`);
await bundle();

const wit = await readFile(witPath);
const bundled = await readFile(bundlePath);
const componentizeJs = join(resolve(opt.tools), "node_modules/@bytecodealliance/componentize-js");
const hash = createHash("sha256");
for (const input of [
  await readFile(new URL(import.meta.url)),
  await readFile(join(resolve(opt.tools), "package-lock.json")),
  wit,
  bundled,
]) {
  hash.update(`${input.length}:`).update(input);
}
const inputs = hash.digest("hex");
const stampPath = join(stage, "inputs.sha256");
const stamp = existsSync(stampPath) ? (await readFile(stampPath, "utf8")).trim() : "";

if (stamp === inputs && existsSync(out)) {
  report("unchanged");
} else {
  const built = await componentizeBundle();
  const before = existsSync(out) ? await readFile(out) : null;
  if (before === null || !Buffer.from(built).equals(before)) {
    const tmp = `${out}.tmp.${process.pid}`;
    await writeFile(tmp, built);
    await rename(tmp, out);
  }
  await writeFile(stampPath, `${inputs}\n`);
  report(before !== null && Buffer.from(built).equals(before) ? "built, same bytes" : "built");
}

// app.js and everything it imports as one ES module, with the host bindings attached; the
// `worker:plugin/...` imports stay for componentize-js to wire to the WIT world.
async function bundle() {
  const entry = [
    'import "worker/component";',
    'export { handle } from "./app.js";',
  ].join("\n");
  try {
    await esbuild.build({
      stdin: { contents: entry, resolveDir: pluginDir, sourcefile: "entry.js" },
      absWorkingDir: pluginDir, // source comments name files relative to the plugin folder
      bundle: true,
      format: "esm",
      platform: "neutral",
      mainFields: ["module", "main"],
      conditions: ["worker", "import", "default"],
      target: "es2022",
      external: ["worker:*"],
      outfile: bundlePath,
      logLevel: "warning", // esbuild prints its errors and warnings with the code around them
      legalComments: "none",
    });
  } catch (e) {
    const sdkMissing = (e.errors ?? []).some((m) => m.text.includes('"worker'));
    const hint = sdkMissing ?
      ` (its package.json must depend on the SDK, e.g. "worker": "file:../../plugin-sdk/js")` :
      "";
    fail(`bundling ${name}/app.js failed${hint}`);
  }
}

async function componentizeBundle() {
  const { componentize } = await import(pathToFileURL(join(componentizeJs, "src/componentize.js")));
  // componentize-js maps the current directory into the build sandbox when the source is in it:
  // run from the stage, so stack traces name the bundle `<plugin>.js` without its folder.
  process.chdir(stage);
  try {
    const { component, imports } = await componentize({
      sourcePath: bundlePath,
      witPath,
      worldName: WORLD,
      disableFeatures: DISABLED_FEATURES,
    });
    await writeFile(join(stage, "imports.json"), `${JSON.stringify(imports)}\n`);
    return component;
  } catch (e) {
    fail(`componentize ${name} failed:\n${e.message ?? e}`);
  }
}

// One line per plugin, as scripts/build-plugins.sh prints its modules, plus what happened.
function report(what) {
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  const size = statSync(out).size;
  const kib = (size / 1024).toFixed(1);
  console.error(`  ${basename(out).padEnd(24)} ${String(size).padStart(8)} bytes  (${kib} KiB)  ${what} in ${seconds} s`);
}

function fail(message) {
  console.error(`build-js: ${message}`);
  process.exit(1);
}
