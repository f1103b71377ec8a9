// moelens: step through a hybrid MoE / Gated DeltaNet language model and see what it does.
export { load, Model, embeddedModelDir, type LoadOptions, type BackendName } from "./model";
export { Session, type ForwardOptions, type ForwardResult, type RouterTrace, type CaptureName } from "./session";
export { Tensor, type TensorData } from "./tensor";
export type { ModelConfig } from "./config";
