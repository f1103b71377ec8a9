#!/usr/bin/env bash
# Checks the TypeScript SDK end to end on a GPU backend (default: cuda), without network access:
# builds the addon with that backend, prints the backends it has, runs the GPU test suites on it
# (MOELENS_TEST_GPU_BACKEND), generates through the CLI, streams a completion from `moelens serve`,
# and executes a notebook. Runs from a checkout, or from one where an offline bundle
# (scripts/offline-bundle.sh) was unpacked: then its Node (build/node/bin/node) is used.
# Every step's output goes to LOG_DIR; summary.txt lists what passed. Exit status 0 when all did.
set -uo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/gpu-sdk-check.sh [options] LOG_DIR

Options:
  --backend <name>    the GPU backend to check: cuda (default), emulator (the kernels on the CPU,
                      slow: proves the flow on a machine without a GPU) or metal
  --prebuilt          use the addon already in build/native/Release instead of building it
  --notebook <name>   the notebook to execute, from notebooks/ (default 01-quickstart)
  --tests <files>     the test files to run, comma-separated (default: the GPU suites)
  -h, --help          this text

CUDA: nvcc from PATH, CUDACXX or /usr/local/cuda/bin; CUDAARCHS picks the GPU architectures
(default 90). Notebook: under Jupyter where python3 has nbconvert, else headless.
EOF
}

backend=cuda
prebuilt=0
notebook=01-quickstart
tests="test/parity.test.ts,test/prefill-attention.test.ts,test/prefill-chunks.test.ts,test/prefill-deltanet.test.ts,test/prefill-router.test.ts,test/metal.test.ts,test/hooks.test.ts,test/generate.test.ts,test/cuda-backend.test.ts"
log_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend="${2:?--backend needs a name}"; shift 2 ;;
    --prebuilt) prebuilt=1; shift ;;
    --notebook) notebook="${2:?--notebook needs a name}"; shift 2 ;;
    --tests) tests="${2:?--tests needs files}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "gpu-sdk-check: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) [ -z "$log_dir" ] || { echo "gpu-sdk-check: one LOG_DIR only ($log_dir, $1)" >&2; exit 2; }; log_dir="$1"; shift ;;
  esac
done
[ -n "$log_dir" ] || { usage >&2; exit 2; }
case "$backend" in cuda|emulator|metal) ;; *) echo "gpu-sdk-check: --backend $backend: use cuda, emulator or metal" >&2; exit 2 ;; esac

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 2
[ -f "notebooks/$notebook.ipynb" ] || { echo "gpu-sdk-check: --notebook $notebook: notebooks/$notebook.ipynb does not exist" >&2; exit 2; }
mkdir -p "$log_dir" || exit 2
log_dir="$(cd "$log_dir" && pwd)"
summary="$log_dir/summary.txt"
: > "$summary"

# The bundled Node first; no step may reach the network (npm, cmake-js, update checks).
[ -x build/node/bin/node ] && export PATH="$root/build/node/bin:$PATH"
# Its headers for the addon's build (cmake-js would otherwise download them).
[ -f build/node/include/node/node.h ] && export npm_config_nodedir="$root/build/node"
export npm_config_offline=true npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
export NO_UPDATE_NOTIFIER=1 CI=1
if [ "$backend" = cuda ] && ! command -v nvcc >/dev/null && [ -z "${CUDACXX:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi

failed=0
# step NAME COMMAND...: runs it with output to LOG_DIR/NAME.log, records status and seconds.
step() {
  local name="$1"; shift
  local start=$SECONDS
  echo "== $name: $*" | tee -a "$log_dir/steps.log"
  "$@" > "$log_dir/$name.log" 2>&1
  local rc=$?
  local line
  if [ $rc -eq 0 ]; then line="ok      $name ($((SECONDS - start)) s)"; else line="FAILED  $name (exit $rc, $((SECONDS - start)) s; see $name.log)"; failed=1; fi
  echo "$line" | tee -a "$summary"
  return $rc
}

{
  echo "node $(node --version) at $(command -v node)"
  uname -srm
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  command -v nvcc >/dev/null && nvcc --version | tail -2
  [ -n "${CUDACXX:-}" ] && "$CUDACXX" --version | tail -2
  command -v cmake >/dev/null && cmake --version | head -1
  true
} > "$log_dir/environment.log" 2>&1
cat "$log_dir/environment.log"

if [ "$prebuilt" = 0 ]; then
  cuda_switch=0
  [ "$backend" = cuda ] && cuda_switch=1
  step build env MOELENS_CUDA=$cuda_switch node scripts/build-native.mjs || { echo "the addon did not build; stopping" | tee -a "$summary"; exit 1; }
fi

node -e '
  const built = require("./dist/sdk/native").native().backends();
  console.log(`backends(): ${built.join(", ")}`);
  if (!built.includes(process.argv[1])) { console.error(`the addon has no ${process.argv[1]} backend`); process.exit(1); }
' "$backend" > "$log_dir/backends.log" 2>&1
rc=$?
cat "$log_dir/backends.log" | tee -a "$summary"
[ $rc -eq 0 ] || { echo "FAILED  backends" | tee -a "$summary"; exit 1; }

IFS=, read -r -a test_files <<< "$tests"
step tests env MOELENS_TEST_GPU_BACKEND="$backend" node node_modules/vitest/vitest.mjs run "${test_files[@]}" \
  --reporter=default --reporter=json --outputFile.json="$log_dir/tests.json"
node -e '
  const r = require(process.argv[1]);
  console.log(`tests on ${process.argv[2]}: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests} skipped, in ${r.numTotalTestSuites} suites`);
' "$log_dir/tests.json" "$backend" 2>/dev/null | tee -a "$summary"

# Off macOS the metal backend is the mock runtime over the emulator: the CLI asks for --emulator.
cli_backend=(--backend "$backend")
[ "$backend" = metal ] && [ "$(uname -s)" != Darwin ] && cli_backend+=(--emulator)

step generate node bin/moelens.js generate "The jury said" "${cli_backend[@]}" --max-tokens 24 --temperature 0

# The server on a free port; one streamed completion; then stopped.
serve_check() {
  node bin/moelens.js serve "${cli_backend[@]}" --port 0 2> "$log_dir/serve-server.log" &
  local server=$!
  local url=""
  for _ in $(seq 1 600); do
    url="$(sed -n 's/^moelens serve: .* at \(http[^ ]*\) .*/\1/p' "$log_dir/serve-server.log" | head -1)"
    [ -n "$url" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.5
  done
  local rc=1
  if [ -n "$url" ]; then
    echo "server at $url"
    node -e '
      const [url] = process.argv.slice(1);
      (async () => {
        const models = await (await fetch(`${url}/models`)).json();
        const model = models.data[0].id;
        const res = await fetch(`${url}/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model, prompt: "The jury said", max_tokens: 24, temperature: 0, stream: true }),
        });
        if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
        let text = "", events = 0, done = false, pending = "";
        const decoder = new TextDecoder();
        for await (const chunk of res.body) {
          const lines = (pending + decoder.decode(chunk, { stream: true })).split("\n");
          pending = lines.pop();
          for (const line of lines) {
            if (!line.startsWith("data: ")) continue;
            if (line === "data: [DONE]") { done = true; continue; }
            events++;
            text += JSON.parse(line.slice(6)).choices?.[0]?.text ?? "";
          }
        }
        console.log(`${model}: ${events} events${done ? ", then [DONE]" : ""}: ${JSON.stringify(text)}`);
        if (!done || events === 0 || text === "") throw new Error("the stream ended without text or without [DONE]");
      })().catch((e) => { console.error(e.message); process.exit(1); });
    ' "$url"
    rc=$?
  else
    echo "the server did not start:"
  fi
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  cat "$log_dir/serve-server.log"
  return $rc
}
step serve serve_check

step notebook node scripts/run-notebook.mjs "notebooks/$notebook.ipynb" --backend "$backend" --out "$log_dir/$notebook.ipynb"
grep -m1 "running under" "$log_dir/notebook.log" | tee -a "$summary"

echo
if [ $failed -eq 0 ]; then echo "all checks passed on $backend (logs in $log_dir)"; else echo "some checks failed on $backend (logs in $log_dir)"; fi
cat "$summary"
exit $failed
