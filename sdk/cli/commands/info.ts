// `moelens info`: what a checkpoint is, how big, and how much memory it takes.
import type { Model } from "../../model";
import { loadModel } from "../load-model";
import type { CliOptions } from "../options";
import { countParameters, stateMemory } from "../parameters";

export async function infoCommand(options: CliOptions): Promise<number> {
  const model = await loadModel(options);
  const report = describe(model);
  process.stdout.write(options.json ? JSON.stringify(report, null, 2) + "\n" : format(report));
  return 0;
}

function describe(model: Model) {
  const c = model.config;
  const attentionLayers = c.layerTypes.filter((t) => t === "full_attention").length;
  const tok = model.tokenizer;
  return {
    dir: model.dir,
    layout: model.info.layout,
    quantized: model.info.quantized,
    backend: model.info.backend,
    precision: model.info.precision,
    config: c,
    layers: { total: c.numLayers, deltanet: c.numLayers - attentionLayers, attention: attentionLayers },
    parameters: countParameters(c),
    memory: { weightBytes: model.info.weightBytes, ...stateMemory(c), processRssBytes: process.memoryUsage().rss },
    tokenizer: tok
      ? { vocabSize: tok.vocabSize, addedTokens: tok.addedTokens.length, chatTemplate: tok.chatTemplate?.origin ?? null }
      : null,
    eosTokenIds: model.generationConfig.eosTokenIds,
    sampling: model.generationConfig.sampling,
  };
}

function format(r: ReturnType<typeof describe>): string {
  const c = r.config;
  const billions = (n: number) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : `${(n / 1e6).toFixed(2)} M`);
  const bytes = (n: number) =>
    n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(2)} GiB` : n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`;
  const rows: [string, string][] = [
    ["model", `${r.dir} (${r.layout} layout${r.quantized ? ", quantized" : ""}, backend ${r.backend}${r.precision === "int24" ? ", int24 activations in decode" : r.precision !== "fp32" ? `, ${r.precision} activations` : ""})`],
    ["type", `${c.modelType}: ${r.layers.total} layers (${r.layers.deltanet} Gated DeltaNet, ${r.layers.attention} gated attention), hidden ${c.hiddenSize}`],
    ["experts", `${c.numExperts} routed, top-${c.expertsPerToken} (width ${c.expertIntermediate}) + 1 shared (width ${c.sharedIntermediate})`],
    ["attention", `${c.numHeads} query / ${c.numKvHeads} KV heads of ${c.headDim} (rotary ${c.rotaryDim}, theta ${c.ropeTheta})`],
    ["deltanet", `${c.linearKeyHeads} key heads of ${c.linearKeyDim}, ${c.linearValueHeads} value heads of ${c.linearValueDim}, conv ${c.convKernel}`],
    ["vocabulary", `${c.vocabSize} rows` + (r.tokenizer ? `, the tokenizer defines ${r.tokenizer.vocabSize}` : ", no tokenizer.json")],
    ["context", `${c.maxPositionEmbeddings} positions`],
    ["parameters", `${billions(r.parameters.total)} total, ${billions(r.parameters.activePerToken)} active per token (embedding ${billions(r.parameters.embedding)})`],
    ["weights", `${bytes(r.memory.weightBytes)} in memory`],
    ["session", `${bytes(r.memory.deltanetBytes)} DeltaNet state + ${bytes(r.memory.kvBytesPerToken)} KV cache per token (fp32)`],
    ["process", `${bytes(r.memory.processRssBytes)} resident`],
    ["chat", r.tokenizer?.chatTemplate ? `template from ${r.tokenizer.chatTemplate}` : "no chat template"],
    ["eos ids", r.eosTokenIds.join(", ")],
    ["sampling", Object.entries(r.sampling).map(([k, v]) => `${k} ${v}`).join(", ")],
  ];
  return rows.map(([k, v]) => `${k.padEnd(11)} ${v}\n`).join("");
}
