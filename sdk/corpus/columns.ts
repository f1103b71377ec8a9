// What each capture adds to a corpus shard: one column per captured value, one row per token, each
// cell a nested fixed-size list over the value's per-token dimensions (e.g. router_experts: layers × k).
import type { ModelConfig } from "../config";
import type { CaptureName, ForwardResult } from "../forward";
import type { Tensor } from "../tensor";

/** Captures a corpus trace can record (the names of ForwardOptions.capture). */
export const CORPUS_CAPTURES: readonly CaptureName[] = ["router", "residual", "residual-mid", "deltanet", "attention-gate"];

export interface CaptureColumn {
  /** Column name in the shards. */
  name: string;
  type: "int32" | "float32";
  /** Per-token shape, e.g. [layers, k] or [layers]. */
  dims: number[];
  /** What each axis is, for the manifest. */
  axes: string[];
  /** Model layer index of each entry of the outer axis, when it is a subset of the layers. */
  layers?: number[];
  /** The forward result's [dims[0], T, ...dims[1:]] tensor. */
  take(r: ForwardResult): Tensor<Int32Array | Float32Array>;
}

export interface CaptureLayout {
  columns: CaptureColumn[];
  /** Bytes per token a forward call returns for these captures (what the shard size bounds). */
  forwardBytesPerToken: number;
}

function missing(what: string): never {
  throw new Error(`corpus trace: the forward result has no ${what} capture`);
}

export function captureLayout(config: ModelConfig, capture: readonly CaptureName[]): CaptureLayout {
  const c = config;
  const L = c.numLayers;
  const layersOf = (kind: string) => c.layerTypes.flatMap((t, i) => (t === kind ? [i] : []));
  const deltanetLayers = layersOf("linear_attention");
  const attentionLayers = layersOf("full_attention");
  const columns: CaptureColumn[] = [];
  let forwardFloats = 0;
  for (const name of capture) {
    switch (name) {
      case "router":
        columns.push(
          { name: "router_experts", type: "int32", dims: [L, c.expertsPerToken], axes: ["layer", "slot"], take: (r) => r.router?.ids ?? missing("router") },
          { name: "router_weights", type: "float32", dims: [L, c.expertsPerToken], axes: ["layer", "slot"], take: (r) => r.router?.weights ?? missing("router") },
          { name: "shared_gate", type: "float32", dims: [L], axes: ["layer"], take: (r) => r.router?.sharedGate ?? missing("router") },
        );
        forwardFloats += L * (2 * c.expertsPerToken + 2 * c.numExperts + 1);
        break;
      case "residual":
        columns.push({ name: "residual", type: "float32", dims: [L, c.hiddenSize], axes: ["layer", "hidden"], take: (r) => r.residual ?? missing("residual") });
        forwardFloats += L * c.hiddenSize;
        break;
      case "residual-mid":
        columns.push({ name: "residual_mid", type: "float32", dims: [L, c.hiddenSize], axes: ["layer", "hidden"], take: (r) => r.residualMid ?? missing("residual-mid") });
        forwardFloats += L * c.hiddenSize;
        break;
      case "deltanet": {
        const dims = [deltanetLayers.length, c.linearValueHeads];
        const axes = ["deltanet layer", "value head"];
        columns.push(
          { name: "deltanet_beta", type: "float32", dims, axes, layers: deltanetLayers, take: (r) => r.deltanet?.beta ?? missing("deltanet") },
          { name: "deltanet_decay", type: "float32", dims, axes, layers: deltanetLayers, take: (r) => r.deltanet?.decay ?? missing("deltanet") },
          { name: "deltanet_state_norm", type: "float32", dims, axes, layers: deltanetLayers, take: (r) => r.deltanet?.stateNorm ?? missing("deltanet") },
        );
        forwardFloats += 3 * dims[0] * dims[1];
        break;
      }
      case "attention-gate": {
        const dims = [attentionLayers.length, c.numHeads * c.headDim];
        columns.push({
          name: "attention_gate", type: "float32", dims, axes: ["attention layer", "head × head_dim"], layers: attentionLayers,
          take: (r) => r.attentionGate?.values ?? missing("attention-gate"),
        });
        forwardFloats += dims[0] * dims[1];
        break;
      }
    }
  }
  return { columns, forwardBytesPerToken: 4 * forwardFloats };
}
