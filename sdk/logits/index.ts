// Helpers on logits: probabilities, the top tokens, losses and uncertainty.
export type { LogitsRow } from "./rows";
export { softmax, logSoftmax, logProb } from "./softmax";
export { entropy, entropies } from "./entropy";
export { tokenNll, nextTokenNll, perplexity } from "./nll";
export { topTokens, type TopToken } from "./top-tokens";
