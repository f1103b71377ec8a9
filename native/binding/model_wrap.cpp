#include "backends/cpu/cpu_backend.h"
#include "core/lens.h"
#include "wraps.h"

namespace moelens::binding {

Napi::Function ModelWrap::Init(Napi::Env env) {
  return DefineClass(env, "NativeModel",
                     {InstanceMethod<&ModelWrap::Config>("config"), InstanceMethod<&ModelWrap::NewSession>("session"),
                      InstanceMethod<&ModelWrap::Info>("info"), InstanceMethod<&ModelWrap::Dispose>("dispose"),
                      InstanceMethod<&ModelWrap::Unembed>("unembed"),
                      InstanceMethod<&ModelWrap::HookPoints>("hookPoints")});
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

// Every hook point of this model (core/hook_points.h), in forward order.
Napi::Value ModelWrap::HookPoints(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Model& m = checked(env);
  const std::vector<HookInstance> points = hook_instances(m.plan().parts());
  Napi::Array out = Napi::Array::New(env, points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    const HookPoint& p = hook_point(points[i].id);
    const bool probs = p.layout == HookLayout::AttentionProbs;
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", points[i].name);
    o.Set("template", p.name);
    if (points[i].layer >= 0) o.Set("layer", points[i].layer);
    Napi::Array dims = Napi::Array::New(env), shape = Napi::Array::New(env);
    auto push = [&](const char* dim, Napi::Value size) {
      dims.Set(dims.Length(), dim);
      shape.Set(shape.Length(), size);
    };
    if (!probs) push("n", Napi::String::New(env, "n"));
    for (HookDim d : p.dims) push(dim_name(d), Napi::Number::New(env, dim_size(m.config(), d)));
    if (probs) {
      push("n", Napi::String::New(env, "n"));
      push("context", Napi::String::New(env, "context"));
    }
    o.Set("dims", dims);
    o.Set("shape", shape);
    o.Set("dtype", p.dtype == HookDtype::I32 ? "int32" : "float32");
    o.Set("editable", p.access == HookAccess::Edit);
    o.Set("optIn", probs);
    o.Set("meaning", p.meaning);
    out.Set(uint32_t(i), o);
  }
  return out;
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
  o.Set("precision", model_->backend().precision_name());
  o.Set("layout", w.layout == CheckpointLayout::HF ? "hf" : "mlx");
  o.Set("weightBytes", Napi::Number::New(env, double(model_->weight_bytes())));
  o.Set("quantized", w.lm_head.quantized() || w.layers.empty() ? w.lm_head.quantized()
                                                              : w.layers[0].moe.gate.quantized());
  return o;
}

namespace {

class UnembedWorker : public Napi::AsyncWorker {
 public:
  UnembedWorker(Napi::Env env, std::shared_ptr<Model> model, std::vector<float> rows, int n, bool norm)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), model_(std::move(model)),
        rows_(std::move(rows)), n_(n), norm_(norm) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    try {
      logits_ = unembed(*model_, rows_.data(), n_, norm_);
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  void OnOK() override {
    auto* heap = new std::vector<float>(std::move(logits_));
    auto buf = Napi::ArrayBuffer::New(Env(), heap->data(), heap->size() * 4,
                                      [](Napi::Env, void*, std::vector<float>* p) { delete p; }, heap);
    deferred_.Resolve(Napi::Float32Array::New(Env(), heap->size(), buf, 0));
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<Model> model_;
  std::vector<float> rows_, logits_;
  int n_;
  bool norm_;
};

}  // namespace

// unembed(rows: Float32Array [n, hidden], applyNorm) -> Promise<Float32Array [n, vocab]>
Napi::Value ModelWrap::Unembed(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Model& m = checked(env);
  if (info.Length() < 1 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    throw Napi::TypeError::New(env, "unembed(rows, applyNorm): rows must be a Float32Array");
  Napi::Float32Array rows = info[0].As<Napi::Float32Array>();
  const size_t H = size_t(m.config().hidden_size);
  if (rows.ElementLength() == 0 || rows.ElementLength() % H)
    throw Napi::RangeError::New(env, "unembed: rows must hold a whole number of hidden-size (" + std::to_string(H) + ") rows");
  bool norm = info.Length() < 2 || info[1].ToBoolean();
  auto* w = new UnembedWorker(env, model_, std::vector<float>(rows.Data(), rows.Data() + rows.ElementLength()),
                              int(rows.ElementLength() / H), norm);
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

Napi::Value ModelWrap::NewSession(const Napi::CallbackInfo& info) {
  checked(info.Env());
  return SessionWrap::Wrap(info.Env(), model_, std::make_unique<Session>(*model_));
}

}  // namespace moelens::binding
