#include <cstring>

#include "wraps.h"

namespace moelens::binding {

namespace {

// Hands a vector's storage to JS: small ones are copied into a JS-owned array (cheaper than an
// external buffer with a finalizer), large ones are handed over without a copy.
template <class T, class Array>
Array to_typed_array(Napi::Env env, std::vector<T>&& v) {
  if (v.size() * sizeof(T) <= 64 * 1024) {
    Array a = Array::New(env, v.size());
    if (!v.empty()) std::memcpy(a.Data(), v.data(), v.size() * sizeof(T));
    return a;
  }
  auto* heap = new std::vector<T>(std::move(v));
  auto buf = Napi::ArrayBuffer::New(env, heap->data(), heap->size() * sizeof(T),
                                    [](Napi::Env, void*, std::vector<T>* p) { delete p; }, heap);
  return Array::New(env, heap->size(), buf, 0);
}

std::vector<int> int_list(Napi::Env env, const Napi::Object& o, const char* key, const std::string& where) {
  std::vector<int> out;
  if (!o.Has(key) || o.Get(key).IsUndefined() || o.Get(key).IsNull()) return out;
  Napi::Value v = o.Get(key);
  if (!v.IsArray()) throw Napi::TypeError::New(env, where + "." + key + " must be an array of integers");
  Napi::Array a = v.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value e = a.Get(i);
    double d = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : 0.5;
    if (d != double(int64_t(d)) || d < -2147483648.0 || d > 2147483647.0)
      throw Napi::TypeError::New(env, where + "." + key + "[" + std::to_string(i) + "] must be an integer");
    out.push_back(int(d));
  }
  return out;
}

Intervention parse_intervention(Napi::Env env, const Napi::Value& v, size_t index) {
  const std::string where = "interventions[" + std::to_string(index) + "]";
  if (!v.IsObject()) throw Napi::TypeError::New(env, where + " must be an object");
  Napi::Object o = v.As<Napi::Object>();
  static const std::pair<const char*, Intervention::Kind> kKinds[] = {
      {"disable-experts", Intervention::Kind::DisableExperts},
      {"force-experts", Intervention::Kind::ForceExperts},
      {"scale-shared-expert", Intervention::Kind::ScaleShared},
      {"steer", Intervention::Kind::Steer},
      {"patch-residual", Intervention::Kind::PatchResidual},
      {"scale-deltanet-state", Intervention::Kind::ScaleDeltaNetState},
  };
  std::string kind = o.Has("type") ? o.Get("type").ToString().Utf8Value() : "";
  Intervention iv;
  bool known = false;
  for (const auto& [name, k] : kKinds)
    if (kind == name) iv.kind = k, known = true;
  if (!known)
    throw Napi::TypeError::New(env, where + ".type '" + kind +
                                        "' is unknown (disable-experts, force-experts, scale-shared-expert, steer, "
                                        "patch-residual, scale-deltanet-state)");
  if (o.Has("layer") && !o.Get("layer").IsUndefined()) {
    Napi::Value l = o.Get("layer");
    if (!l.IsNumber() || l.As<Napi::Number>().DoubleValue() != double(l.As<Napi::Number>().Int32Value()))
      throw Napi::TypeError::New(env, where + ".layer must be an integer");
    iv.layer = l.As<Napi::Number>().Int32Value();
  }
  iv.experts = int_list(env, o, "experts", where);
  iv.positions = int_list(env, o, "positions", where);
  if (o.Has("scale") && !o.Get("scale").IsUndefined()) {
    if (!o.Get("scale").IsNumber()) throw Napi::TypeError::New(env, where + ".scale must be a number");
    iv.scale = o.Get("scale").As<Napi::Number>().FloatValue();
  }
  if (o.Has("vector") && !o.Get("vector").IsUndefined()) {
    Napi::Value vec = o.Get("vector");
    if (!vec.IsTypedArray() || vec.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
      throw Napi::TypeError::New(env, where + ".vector must be a Float32Array");
    Napi::Float32Array f = vec.As<Napi::Float32Array>();
    iv.vector.assign(f.Data(), f.Data() + f.ElementLength());
  }
  return iv;
}

// The options object of forward() and decodeGreedy(): logits mode, captures, interventions.
ForwardOptions parse_options(Napi::Env env, Napi::Object o) {
  ForwardOptions opt;
  if (o.Has("logits")) {
    std::string mode = o.Get("logits").ToString();
    if (mode == "all") opt.logits = LogitsMode::All;
    else if (mode == "last") opt.logits = LogitsMode::Last;
    else if (mode == "none") opt.logits = LogitsMode::None;
    else throw Napi::TypeError::New(env, "options.logits must be 'all', 'last' or 'none'");
  }
  auto flag = [&](const char* key) { return o.Has(key) && o.Get(key).ToBoolean().Value(); };
  opt.capture.router = flag("router");
  opt.capture.residual = flag("residual");
  opt.capture.residual_mid = flag("residualMid");
  opt.capture.deltanet = flag("deltanet");
  opt.capture.attention_gate = flag("attentionGate");
  opt.capture.attention_layers = int_list(env, o, "attentionLayers", "capture");
  opt.capture.attention_heads = int_list(env, o, "attentionHeads", "capture");
  if (o.Has("interventions") && !o.Get("interventions").IsUndefined()) {
    if (!o.Get("interventions").IsArray()) throw Napi::TypeError::New(env, "interventions must be an array");
    Napi::Array a = o.Get("interventions").As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) opt.interventions.push_back(parse_intervention(env, a.Get(i), i));
  }
  return opt;
}

}  // namespace

// Runs forward(ids) or, with greedy_steps > 0, decode_greedy(ids[0], greedy_steps) off the JS thread.
class ForwardWorker : public Napi::AsyncWorker {
 public:
  ForwardWorker(Napi::Env env, SessionWrap* owner, Napi::Object owner_obj, std::vector<int32_t> ids,
                ForwardOptions options, int greedy_steps = 0)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), owner_(owner), ids_(std::move(ids)),
        options_(options), greedy_steps_(greedy_steps) {
    owner_ref_ = Napi::Persistent(owner_obj);  // keep the session alive while the work runs
  }
  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      if (greedy_steps_ > 0) chosen_ = owner_->session_->decode_greedy(ids_[0], greedy_steps_, options_);
      else result_ = owner_->session_->forward(ids_.data(), int(ids_.size()), options_);
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    owner_->busy_ = false;
    owner_->report_memory(env);
    if (greedy_steps_ > 0) return deferred_.Resolve(to_typed_array<int32_t, Napi::Int32Array>(env, std::move(chosen_)));
    Napi::Object o = Napi::Object::New(env);
    o.Set("n", Napi::Number::New(env, result_.n));
    o.Set("logitsRows", Napi::Number::New(env, result_.logits_rows));
    o.Set("logits", to_typed_array<float, Napi::Float32Array>(env, std::move(result_.logits)));
    o.Set("position", Napi::Number::New(env, result_.position));
    auto f32 = [&](const char* key, std::vector<float>& v, bool on) {
      if (on) o.Set(key, to_typed_array<float, Napi::Float32Array>(env, std::move(v)));
    };
    const CaptureSpec& cap = options_.capture;
    f32("routerLogits", result_.router_logits, cap.router);
    f32("routerProbs", result_.router_probs, cap.router);
    if (cap.router) o.Set("routerIds", to_typed_array<int32_t, Napi::Int32Array>(env, std::move(result_.router_ids)));
    f32("routerWeights", result_.router_weights, cap.router);
    f32("sharedGate", result_.shared_gate, cap.router);
    f32("residual", result_.residual, cap.residual);
    f32("residualMid", result_.residual_mid, cap.residual_mid);
    f32("deltanetBeta", result_.deltanet_beta, cap.deltanet);
    f32("deltanetDecay", result_.deltanet_decay, cap.deltanet);
    f32("deltanetStateNorm", result_.deltanet_state_norm, cap.deltanet);
    f32("attentionGate", result_.attention_gate, cap.attention_gate);
    f32("attention", result_.attention, !cap.attention_layers.empty());
    deferred_.Resolve(o);
  }

  void OnError(const Napi::Error& e) override {
    owner_->busy_ = false;
    owner_->report_memory(Env());
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  SessionWrap* owner_;
  Napi::ObjectReference owner_ref_;
  std::vector<int32_t> ids_;
  ForwardOptions options_;
  int greedy_steps_;
  ForwardResult result_;
  std::vector<int32_t> chosen_;
};

Napi::Function SessionWrap::Init(Napi::Env env) {
  return DefineClass(env, "NativeSession",
                     {InstanceMethod<&SessionWrap::Forward>("forward"),
                      InstanceMethod<&SessionWrap::DecodeGreedy>("decodeGreedy"), InstanceMethod<&SessionWrap::Reset>("reset"),
                      InstanceMethod<&SessionWrap::Fork>("fork"), InstanceMethod<&SessionWrap::Cancel>("cancel"),
                      InstanceMethod<&SessionWrap::DeltaNetState>("deltanetState"),
                      InstanceMethod<&SessionWrap::Dispose>("dispose"),
                      InstanceAccessor<&SessionWrap::Position>("position"),
                      InstanceAccessor<&SessionWrap::MemoryBytes>("memoryBytes")});
}

Napi::Object SessionWrap::Wrap(Napi::Env env, std::shared_ptr<Model> model, std::unique_ptr<Session> session) {
  Napi::Object obj = env.GetInstanceData<Constructors>()->session.New({});
  SessionWrap* w = Unwrap(obj);
  w->model_ = std::move(model);
  w->session_ = std::move(session);
  w->report_memory(env);
  return obj;
}

SessionWrap::SessionWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SessionWrap>(info) {}

void SessionWrap::report_memory(Napi::Env env) {
  const int64_t now = session_ ? int64_t(session_->memory_bytes()) : 0;
  if (now != reported_bytes_) Napi::MemoryManagement::AdjustExternalMemory(env, now - reported_bytes_);
  reported_bytes_ = now;
}

void SessionWrap::Finalize(Napi::Env env) {
  if (reported_bytes_) Napi::MemoryManagement::AdjustExternalMemory(env, -reported_bytes_);
  reported_bytes_ = 0;
}

// Frees the session's state now; the object is unusable afterwards.
Napi::Value SessionWrap::Dispose(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (busy_) throw Napi::Error::New(env, "session is busy: await the running call (or cancel it) before dispose()");
  session_.reset();
  model_.reset();
  report_memory(env);
  return env.Undefined();
}

void SessionWrap::check_idle(Napi::Env env) const {
  if (!session_) throw Napi::Error::New(env, "session was disposed");
  if (busy_) throw Napi::Error::New(env, "session is busy: await the previous prefill/decode before starting another");
}

Napi::Value SessionWrap::Forward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  check_idle(env);
  if (info.Length() < 1 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    throw Napi::TypeError::New(env, "forward(ids, options): ids must be an Int32Array");
  Napi::Int32Array ids = info[0].As<Napi::Int32Array>();
  std::vector<int32_t> copy(ids.Data(), ids.Data() + ids.ElementLength());
  ForwardOptions opt = info.Length() > 1 && info[1].IsObject() ? parse_options(env, info[1].As<Napi::Object>()) : ForwardOptions{};
  cancel_ = false;
  opt.cancel = &cancel_;
  busy_ = true;
  auto* worker = new ForwardWorker(env, this, info.This().As<Napi::Object>(), std::move(copy), opt);
  Napi::Promise p = worker->promise();
  worker->Queue();
  return p;
}

// decodeGreedy(first, steps, options) -> Promise<Int32Array> of the chosen tokens.
Napi::Value SessionWrap::DecodeGreedy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  check_idle(env);
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber())
    throw Napi::TypeError::New(env, "decodeGreedy(first, steps, options): first and steps must be numbers");
  const double first = info[0].As<Napi::Number>().DoubleValue(), steps = info[1].As<Napi::Number>().DoubleValue();
  if (first != double(int32_t(first)) || steps != double(int32_t(steps)) || steps < 1)
    throw Napi::TypeError::New(env, "decodeGreedy: first must be an integer token id and steps a positive integer");
  ForwardOptions opt = info.Length() > 2 && info[2].IsObject() ? parse_options(env, info[2].As<Napi::Object>()) : ForwardOptions{};
  cancel_ = false;
  opt.cancel = &cancel_;
  busy_ = true;
  auto* worker = new ForwardWorker(env, this, info.This().As<Napi::Object>(), {int32_t(first)}, opt, int(steps));
  Napi::Promise p = worker->promise();
  worker->Queue();
  return p;
}

Napi::Value SessionWrap::Reset(const Napi::CallbackInfo& info) {
  check_idle(info.Env());
  session_->reset();
  report_memory(info.Env());
  return info.Env().Undefined();
}

Napi::Value SessionWrap::Fork(const Napi::CallbackInfo& info) {
  check_idle(info.Env());
  return Wrap(info.Env(), model_, session_->fork());
}

Napi::Value SessionWrap::DeltaNetState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  check_idle(env);
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "deltanetState(layer): layer must be a number");
  std::vector<float> recurrent, conv;
  try {
    session_->deltanet_state(info[0].As<Napi::Number>().Int32Value(), &recurrent, &conv);
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("recurrent", to_typed_array<float, Napi::Float32Array>(env, std::move(recurrent)));
  o.Set("conv", to_typed_array<float, Napi::Float32Array>(env, std::move(conv)));
  return o;
}

Napi::Value SessionWrap::Cancel(const Napi::CallbackInfo& info) {
  cancel_ = true;
  return info.Env().Undefined();
}

Napi::Value SessionWrap::MemoryBytes(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), double(reported_bytes_));
}

Napi::Value SessionWrap::Position(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), session_ ? session_->position() : 0);
}

}  // namespace moelens::binding
