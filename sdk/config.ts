// The model's hyper-parameters as the core read them from config.json.
import type { NativeConfig } from "./native";

export type ModelConfig = NativeConfig;
