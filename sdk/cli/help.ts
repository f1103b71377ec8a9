// `moelens --help`.
import { embeddedModelDir } from "../model";

export function helpText(): string {
  return `moelens: run and inspect Qwen3.5/3.6-MoE models (Gated DeltaNet + MoE)

Usage:
  moelens generate [options] [prompt]   stream a continuation of the prompt (read from stdin when omitted)
  moelens chat [options]                interactive multi-turn chat (/reset starts over, /exit or Ctrl+D leaves)
  moelens info [options]                configuration, parameter count and memory of a model
  moelens serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--max-queue N]
                                        OpenAI-compatible HTTP server ("moelens serve --help" for more)
  moelens trace --prompts FILE.jsonl --out DIR [--capture router,residual]
                                        trace a corpus into Arrow shards, resumable
                                        ("moelens trace --help" for more)
  moelens kernel install [--user | --sys-prefix | --prefix DIR]
  moelens kernel uninstall [--user | --sys-prefix | --prefix DIR]
                                        the Jupyter kernel ("moelens kernel --help" for more)

Model:
  --model <dir>              checkpoint folder, HF or mlx-community layout
                             (default: the embedded model, ${embeddedModelDir})
  --backend <name>           compute backend: cpu (default); emulator (the GPU kernels on the CPU
                             emulator, a test harness far slower than cpu); metal / cuda where
                             this build has them; off macOS, metal runs only with --emulator
  --emulator                 with --backend metal off macOS: run the Metal host over its mock
                             runtime on the CPU emulator (a test harness, far slower than cpu)
  --threads <n>              CPU threads (default: all cores)
  --precision <p>            fp32 (default: exact), int24 (cpu backend: integer activations for
                             quantized weights, within the parity tests, faster decode), int16 or
                             int8 (faster still, reduced precision; docs/performance.md)

Generation (generate, chat):
  --max-tokens <n>           most tokens to generate (default 256); more than the model's context
                             holds after the prompt is refused
  --temperature <t>          0 picks the most likely token; default: the model's
                             generation_config.json, else 0
  --top-k <k>                sample from the k most likely tokens (0 = off)
  --top-p <p>                ... from the smallest set holding probability p (1 = off)
  --min-p <p>                drop tokens less likely than p times the best (0 = off)
  --repetition-penalty <r>   > 1 discourages tokens already seen (1 = off)
  --presence-penalty <p>     subtracted from tokens already generated (0 = off)
  --frequency-penalty <p>    ... once per earlier occurrence in the output (0 = off)
  --seed <n>                 the same seed gives the same tokens
  --stop <text>              stop before this text; repeat for several (newline: --stop $'\\n')
  --skip-special-tokens      leave special tokens such as <|im_end|> out of the text
  --system <text>            system prompt (chat, and generate --chat)
  --think, --no-think        the chat template's thinking switch (enable_thinking)
  --chat                     generate: wrap the prompt as a user message in the chat template

Info:
  --json                     print the information as JSON

  -h, --help                 this help

generate prints the text on stdout and the speed (prefill and decode tokens/s) on stderr, on a
line of its own. Each generation flag is the SDK option's name in kebab case (topP: --top-p) and
takes the same values. Exit status: 0 done, 1 an error, 2 a usage error, 130 interrupted (Ctrl+C).
`;
}
