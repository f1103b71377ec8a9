// Interventions as the core takes them: router, shared-expert and state edits as they are, steering
// and patching as edits of blocks.{layer}.resid_post.
import type { HookEdit } from "../hooks/edits";
import type { NativeIntervention } from "../native";
import type { Intervention } from "./interventions";

export function lowerInterventions(
  interventions: readonly Intervention[],
  hiddenSize: number,
): { interventions: NativeIntervention[]; edits: HookEdit[] } {
  const out: NativeIntervention[] = [];
  const edits: HookEdit[] = [];
  interventions.forEach((iv, i) => {
    switch (iv.type) {
      case "steer": {
        if (!(iv.vector instanceof Float32Array) || iv.vector.length !== hiddenSize) {
          throw new RangeError(`intervention ${i} (steer): vector has ${iv.vector?.length} values; hidden size is ${hiddenSize}`);
        }
        const scale = iv.scale ?? 1;
        const values = iv.vector.map((v) => v * scale);
        edits.push({ hook: `blocks.${iv.layer}.resid_post`, op: "add", values, positions: iv.positions });
        break;
      }
      case "patch-residual":
        if (!iv.positions?.length) throw new RangeError(`intervention ${i} (patch-residual): needs at least one position`);
        if (!(iv.vector instanceof Float32Array) || iv.vector.length !== iv.positions.length * hiddenSize) {
          throw new RangeError(
            `intervention ${i} (patch-residual): values hold ${iv.vector?.length} numbers; ${iv.positions.length} positions x hidden ${hiddenSize} needed`,
          );
        }
        edits.push({ hook: `blocks.${iv.layer}.resid_post`, op: "set", values: iv.vector, positions: iv.positions });
        break;
      case "bias-experts":
        out.push({ type: iv.type, layer: iv.layer, experts: iv.experts, values: Float32Array.from(iv.biases), positions: iv.positions });
        break;
      default:
        out.push(iv as NativeIntervention);
    }
  });
  return { interventions: out, edits };
}
