// moelens: step through a hybrid MoE / Gated DeltaNet language model and see what it does.
export { load, Model, embeddedModelDir, type LoadOptions, type BackendName, type Precision, precisions } from "./model";
export { Session } from "./session";
export type { ForwardOptions, ForwardResult, CaptureName } from "./forward";
export { Tensor, type TensorData } from "./tensor";
export type { ModelConfig } from "./config";
export { RouterTrace } from "./trace/router";
export { ExpertLoad } from "./trace/expert-load";
export { DeltaNetTrace } from "./trace/deltanet";
export { AttentionTrace, AttentionGateTrace } from "./trace/attention";
export { residualToArrow } from "./trace/residual";
export type { TokenSpan } from "./trace/span";
export type { HookPoint } from "./hooks/hook-point";
export { ActivationCache } from "./hooks/activation-cache";
export { CAPTURE_KINDS, type CaptureKind } from "./hooks/aliases";
export { type HookEdit, type EditSelection, setAt, addAt, scaleAt, zeroAt, meanAblate } from "./hooks/edits";
export type { Hook, HookFunction, HookContext } from "./hooks/hook-function";
export { concatResults } from "./trace/concat-results";
export {
  type Intervention,
  disableExperts,
  forceExperts,
  biasExperts,
  scaleSharedExpert,
  steer,
  patchResidual,
  scaleDeltaNetState,
  resetDeltaNetState,
} from "./intervene/interventions";
export type { LensTop } from "./lens";
export {
  type LogitsRow,
  softmax,
  logSoftmax,
  logProb,
  entropy,
  entropies,
  tokenNll,
  nextTokenNll,
  perplexity,
  topTokens,
  type TopToken,
} from "./logits";
export { arrowTable, writeArrowFile, writeArrowStream, toArrowIPC, fixedSizeListVector } from "./arrow";
export {
  traceCorpus,
  CORPUS_CAPTURES,
  type CorpusTraceOptions,
  type CorpusProgress,
  type CorpusTraceResult,
  type Manifest as CorpusManifest,
  type ShardEntry,
  type ColumnEntry,
  type CorpusCursor,
} from "./corpus";
export { loadTokenizer, Tokenizer, type Encoding, type DecodeOptions, type AddedToken } from "./tokenizer/tokenizer";
export { StreamDecoder } from "./tokenizer/stream-decoder";
export { ChatTemplate, loadChatTemplate, type ChatRenderOptions } from "./chat/template";
export type { ChatMessage, ChatRole, ChatToolCall } from "./chat/message";
export { Conversation, type ConversationOptions } from "./chat/conversation";
export { Sampler, type SamplerOptions, type SamplingContext } from "./generate/sampler";
export { loadGenerationConfig, type GenerationConfig } from "./generate/generation-config";
export type {
  GenerateInput,
  GenerateOptions,
  GenerateChunk,
  GenerateTimings,
  FinishReason,
} from "./generate/generate";
export { serve, type ServeOptions, type MoelensServer } from "./serve/server";
export type { RoutingSummary, LayerRouting } from "./serve/routing-summary";
export {
  Figure,
  type FigureSpec,
  type PlotlyTrace,
  type PlotlyLayout,
  resendPlotlyLibrary,
  expertLoadHeatmap,
  type ExpertLoadHeatmapOptions,
  type LoadMetric,
  tokenRouting,
  type TokenRoutingOptions,
  expertCoOccurrence,
  coOccurrenceCounts,
  type CoOccurrenceOptions,
  routingConsistency,
  top1MutualInformation,
  type RoutingConsistencyOptions,
  deltanetGates,
  stateNormCurves,
  type DeltaNetPlotOptions,
  attentionMap,
  type AttentionMapOptions,
  logitLensTable,
  type LogitLensTableOptions,
  tokenEntropy,
  type TokenEntropyOptions,
  compareLogits,
  compareRouting,
  type CompareOptions,
  tokenLabels,
  visibleToken,
  type TokenDecoder,
  expertColor,
  expertBackground,
} from "./plot";
export { TokenStream, type TokenStreamOptions, type StreamPiece, ProgressBar, LogitLensTable } from "./display";
