#include "wraps.h"

namespace moelens::binding {

Napi::Function ModelWrap::Init(Napi::Env env) {
  return DefineClass(env, "NativeModel",
                     {InstanceMethod<&ModelWrap::Config>("config"), InstanceMethod<&ModelWrap::NewSession>("session"),
                      InstanceMethod<&ModelWrap::Info>("info"), InstanceMethod<&ModelWrap::Dispose>("dispose")});
}

Napi::Object ModelWrap::Wrap(Napi::Env env, std::shared_ptr<Model> model) {
  Napi::Object obj = env.GetInstanceData<Constructors>()->model.New({});
  Unwrap(obj)->model_ = std::move(model);
  return obj;
}

ModelWrap::ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {}

const Model& ModelWrap::checked(Napi::Env env) const {
  if (!model_) throw Napi::Error::New(env, "model was disposed");
  return *model_;
}

// Drops this handle's reference: the weights are unmapped once no session uses them either.
Napi::Value ModelWrap::Dispose(const Napi::CallbackInfo& info) {
  model_.reset();
  return info.Env().Undefined();
}

Napi::Value ModelWrap::Config(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const ModelConfig& c = checked(env).config();
  Napi::Object o = Napi::Object::New(env);
  auto num = [&](const char* k, double v) { o.Set(k, Napi::Number::New(env, v)); };
  o.Set("modelType", c.model_type);
  num("vocabSize", c.vocab_size);
  num("hiddenSize", c.hidden_size);
  num("numLayers", c.num_layers);
  Napi::Array kinds = Napi::Array::New(env, c.layer_kinds.size());
  for (size_t i = 0; i < c.layer_kinds.size(); ++i)
    kinds.Set(uint32_t(i), c.layer_kinds[i] == LayerKind::DeltaNet ? "linear_attention" : "full_attention");
  o.Set("layerTypes", kinds);
  num("numHeads", c.num_heads);
  num("numKvHeads", c.num_kv_heads);
  num("headDim", c.head_dim);
  num("rotaryDim", c.rotary_dim);
  num("ropeTheta", c.rope_theta);
  num("linearKeyHeads", c.linear_key_heads);
  num("linearValueHeads", c.linear_value_heads);
  num("linearKeyDim", c.linear_key_dim);
  num("linearValueDim", c.linear_value_dim);
  num("convKernel", c.conv_kernel);
  num("numExperts", c.num_experts);
  num("expertsPerToken", c.experts_per_token);
  num("expertIntermediate", c.expert_intermediate);
  num("sharedIntermediate", c.shared_intermediate);
  num("rmsNormEps", c.rms_norm_eps);
  num("maxPositionEmbeddings", c.max_position_embeddings);
  Napi::Array eos = Napi::Array::New(env, c.eos_token_ids.size());
  for (size_t i = 0; i < c.eos_token_ids.size(); ++i) eos.Set(uint32_t(i), c.eos_token_ids[i]);
  o.Set("eosTokenIds", eos);
  return o;
}

Napi::Value ModelWrap::Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  checked(env);
  Napi::Object o = Napi::Object::New(env);
  const ModelWeights& w = model_->weights();
  o.Set("dir", model_->dir());
  o.Set("backend", model_->backend().name());
  o.Set("layout", w.layout == CheckpointLayout::HF ? "hf" : "mlx");
  o.Set("weightBytes", Napi::Number::New(env, double(model_->weight_bytes())));
  o.Set("quantized", w.lm_head.quantized() || w.layers.empty() ? w.lm_head.quantized()
                                                              : w.layers[0].moe.gate.quantized());
  return o;
}

Napi::Value ModelWrap::NewSession(const Napi::CallbackInfo& info) {
  checked(info.Env());
  return SessionWrap::Wrap(info.Env(), model_, std::make_unique<Session>(*model_));
}

}  // namespace moelens::binding
