#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/error.h"
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

std::vector<float> float_list(Napi::Env env, const Napi::Object& o, const char* key, const std::string& where) {
  std::vector<float> out;
  if (!o.Has(key) || o.Get(key).IsUndefined()) return out;
  Napi::Value v = o.Get(key);
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    throw Napi::TypeError::New(env, where + "." + key + " must be a Float32Array");
  Napi::Float32Array f = v.As<Napi::Float32Array>();
  out.assign(f.Data(), f.Data() + f.ElementLength());
  return out;
}

float number(Napi::Env env, const Napi::Object& o, const char* key, const std::string& where, float otherwise) {
  if (!o.Has(key) || o.Get(key).IsUndefined()) return otherwise;
  if (!o.Get(key).IsNumber()) throw Napi::TypeError::New(env, where + "." + key + " must be a number");
  return o.Get(key).As<Napi::Number>().FloatValue();
}

std::vector<std::string> string_list(Napi::Env env, const Napi::Object& o, const char* key) {
  std::vector<std::string> out;
  if (!o.Has(key) || o.Get(key).IsUndefined()) return out;
  if (!o.Get(key).IsArray()) throw Napi::TypeError::New(env, std::string(key) + " must be an array of strings");
  Napi::Array a = o.Get(key).As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); ++i) {
    if (!a.Get(i).IsString())
      throw Napi::TypeError::New(env, std::string(key) + "[" + std::to_string(i) + "] must be a string");
    out.push_back(a.Get(i).As<Napi::String>().Utf8Value());
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
      {"bias-experts", Intervention::Kind::BiasExperts},
      {"scale-shared-expert", Intervention::Kind::ScaleShared},
      {"scale-deltanet-state", Intervention::Kind::ScaleDeltaNetState},
  };
  std::string kind = o.Has("type") ? o.Get("type").ToString().Utf8Value() : "";
  Intervention iv;
  bool known = false;
  for (const auto& [name, k] : kKinds)
    if (kind == name) iv.kind = k, known = true;
  if (!known)
    throw Napi::TypeError::New(env, where + ".type '" + kind +
                                        "' is unknown (disable-experts, force-experts, bias-experts, "
                                        "scale-shared-expert, scale-deltanet-state)");
  if (o.Has("layer") && !o.Get("layer").IsUndefined()) {
    Napi::Value l = o.Get("layer");
    if (!l.IsNumber() || l.As<Napi::Number>().DoubleValue() != double(l.As<Napi::Number>().Int32Value()))
      throw Napi::TypeError::New(env, where + ".layer must be an integer");
    iv.layer = l.As<Napi::Number>().Int32Value();
  }
  iv.experts = int_list(env, o, "experts", where);
  iv.positions = int_list(env, o, "positions", where);
  iv.scale = number(env, o, "scale", where, 1.0f);
  iv.values = float_list(env, o, "values", where);
  return iv;
}

HookEdit parse_edit(Napi::Env env, const Napi::Value& v, size_t index) {
  const std::string where = "edits[" + std::to_string(index) + "]";
  if (!v.IsObject()) throw Napi::TypeError::New(env, where + " must be an object");
  Napi::Object o = v.As<Napi::Object>();
  static const std::pair<const char*, HookEdit::Op> kOps[] = {
      {"set", HookEdit::Op::Set},     {"add", HookEdit::Op::Add},   {"scale", HookEdit::Op::Scale},
      {"zero", HookEdit::Op::Zero},   {"mean", HookEdit::Op::Mean},
  };
  HookEdit e;
  if (!o.Has("hook") || !o.Get("hook").IsString()) throw Napi::TypeError::New(env, where + ".hook must be a hook point name");
  e.name = o.Get("hook").As<Napi::String>().Utf8Value();
  const std::string op = o.Has("op") ? o.Get("op").ToString().Utf8Value() : "";
  bool known = false;
  for (const auto& [name, k] : kOps)
    if (op == name) e.op = k, known = true;
  if (!known) throw Napi::TypeError::New(env, where + ".op '" + op + "' is unknown (set, add, scale, zero, mean)");
  e.positions = int_list(env, o, "positions", where);
  e.heads = int_list(env, o, "heads", where);
  e.channels = int_list(env, o, "channels", where);
  e.values = float_list(env, o, "values", where);
  e.scale = number(env, o, "scale", where, 1.0f);
  return e;
}

// The options object of forward() and decodeGreedy(): logits mode, captures, interventions, edits,
// hook patterns.
ForwardOptions parse_options(Napi::Env env, Napi::Object o) {
  ForwardOptions opt;
  if (o.Has("logits")) {
    std::string mode = o.Get("logits").ToString();
    if (mode == "all") opt.logits = LogitsMode::All;
    else if (mode == "last") opt.logits = LogitsMode::Last;
    else if (mode == "none") opt.logits = LogitsMode::None;
    else throw Napi::TypeError::New(env, "options.logits must be 'all', 'last' or 'none'");
  }
  opt.capture.names = string_list(env, o, "capture");
  opt.capture.positions = int_list(env, o, "capturePositions", "options");
  opt.capture.attention_heads = int_list(env, o, "attentionHeads", "options");
  auto objects = [&](const char* key, auto parse, auto& into) {
    if (!o.Has(key) || o.Get(key).IsUndefined()) return;
    if (!o.Get(key).IsArray()) throw Napi::TypeError::New(env, std::string(key) + " must be an array");
    Napi::Array a = o.Get(key).As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) into.push_back(parse(env, a.Get(i), i));
  };
  objects("interventions", parse_intervention, opt.interventions);
  objects("edits", parse_edit, opt.edits);
  opt.hooks.patterns = string_list(env, o, "hooks");
  return opt;
}

// Calls the JS hook function from the worker thread: the worker waits until the main thread has run
// it (Napi::ThreadSafeFunction), so the forward pass continues with its result.
class HookBridge {
 public:
  HookBridge(Napi::Env env, Napi::Function fn) : tsfn_(Napi::ThreadSafeFunction::New(env, fn, "moelens hook", 0, 1)) {}
  ~HookBridge() { tsfn_.Release(); }

  // On the worker thread.
  bool call(HookCall& c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      call_ = &c;
      done_ = false;
      replaced_ = false;
      error_.clear();
    }
    if (tsfn_.BlockingCall([this](Napi::Env env, Napi::Function fn) { run(env, fn); }) != napi_ok)
      throw Error("hook " + std::to_string(c.hook) + " (" + c.name + "): JavaScript is shutting down");
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    if (!error_.empty()) throw Error(error_);
    return replaced_;
  }

  // The exception a hook threw (on the main thread, once the call has failed).
  Napi::Value thrown(Napi::Env env) { return thrown_.IsEmpty() ? env.Undefined() : thrown_.Value(); }

 private:
  // On the main thread.
  void run(Napi::Env env, Napi::Function fn) {
    HookCall& c = *call_;
    std::string error;
    bool replaced = false;
    try {
      Napi::Float32Array values = Napi::Float32Array::New(env, c.values.size());
      std::memcpy(values.Data(), c.values.data(), c.values.size() * 4);
      Napi::Array shape = Napi::Array::New(env, c.shape.size());
      for (size_t i = 0; i < c.shape.size(); ++i) shape.Set(uint32_t(i), c.shape[i]);
      Napi::Value r = fn.Call({Napi::Number::New(env, c.hook), Napi::String::New(env, c.name),
                               Napi::Number::New(env, c.layer), shape, Napi::Number::New(env, c.position), values});
      if (r.IsTypedArray() && r.As<Napi::TypedArray>().TypedArrayType() == napi_float32_array) {
        Napi::Float32Array f = r.As<Napi::Float32Array>();
        if (f.ElementLength() != c.values.size())
          error = "hook " + std::to_string(c.hook) + " (" + c.name + ") returned " + std::to_string(f.ElementLength()) +
                  " values; " + std::to_string(c.values.size()) + " expected";
        else std::memcpy(c.values.data(), f.Data(), c.values.size() * 4), replaced = true;
      } else if (!r.IsUndefined()) {
        error = "hook " + std::to_string(c.hook) + " (" + c.name + ") must return a Float32Array or undefined";
      }
    } catch (const Napi::Error& e) {
      error = e.Message().empty() ? "hook " + std::to_string(c.hook) + " (" + c.name + ") threw" : e.Message();
      thrown_ = Napi::Persistent(e.Value());
    }
    std::lock_guard<std::mutex> lock(mu_);
    error_ = error;
    replaced_ = replaced;
    done_ = true;
    cv_.notify_one();
  }

  Napi::ThreadSafeFunction tsfn_;
  std::mutex mu_;
  std::condition_variable cv_;
  HookCall* call_ = nullptr;
  bool done_ = false, replaced_ = false;
  std::string error_;
  Napi::ObjectReference thrown_;
};

}  // namespace

// Runs forward(ids) or, with greedy_steps > 0, decode_greedy(ids[0], greedy_steps) off the JS thread.
class ForwardWorker : public Napi::AsyncWorker {
 public:
  ForwardWorker(Napi::Env env, SessionWrap* owner, Napi::Object owner_obj, std::vector<int32_t> ids,
                ForwardOptions options, int greedy_steps = 0, std::unique_ptr<HookBridge> bridge = nullptr)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), owner_(owner), ids_(std::move(ids)),
        options_(std::move(options)), greedy_steps_(greedy_steps), bridge_(std::move(bridge)) {
    owner_ref_ = Napi::Persistent(owner_obj);  // keep the session alive while the work runs
    if (bridge_) options_.hooks.call = [b = bridge_.get()](HookCall& c) { return b->call(c); };
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
    Napi::Array captures = Napi::Array::New(env, result_.captures.size());
    for (size_t i = 0; i < result_.captures.size(); ++i) {
      Captured& c = result_.captures[i];
      Napi::Object e = Napi::Object::New(env);
      e.Set("name", c.name);
      Napi::Array shape = Napi::Array::New(env, c.shape.size());
      for (size_t k = 0; k < c.shape.size(); ++k) shape.Set(uint32_t(k), c.shape[k]);
      e.Set("shape", shape);
      if (hook_point(c.id).dtype == HookDtype::I32)
        e.Set("data", to_typed_array<int32_t, Napi::Int32Array>(env, std::move(c.i32)));
      else e.Set("data", to_typed_array<float, Napi::Float32Array>(env, std::move(c.f32)));
      captures.Set(uint32_t(i), e);
    }
    o.Set("captures", captures);
    deferred_.Resolve(o);
  }

  void OnError(const Napi::Error& e) override {
    owner_->busy_ = false;
    owner_->report_memory(Env());
    Napi::Value thrown = bridge_ ? bridge_->thrown(Env()) : Env().Undefined();
    deferred_.Reject(thrown.IsUndefined() ? e.Value() : thrown);
  }

 private:
  Napi::Promise::Deferred deferred_;
  SessionWrap* owner_;
  Napi::ObjectReference owner_ref_;
  std::vector<int32_t> ids_;
  ForwardOptions options_;
  int greedy_steps_;
  std::unique_ptr<HookBridge> bridge_;
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
  std::unique_ptr<HookBridge> bridge;
  if (!opt.hooks.patterns.empty()) {
    Napi::Value fn = info[1].As<Napi::Object>().Get("hookFunction");
    if (!fn.IsFunction()) throw Napi::TypeError::New(env, "options.hookFunction must be a function when hooks are given");
    bridge = std::make_unique<HookBridge>(env, fn.As<Napi::Function>());
  }
  cancel_ = false;
  opt.cancel = &cancel_;
  busy_ = true;
  auto* worker = new ForwardWorker(env, this, info.This().As<Napi::Object>(), std::move(copy), std::move(opt), 0,
                                   std::move(bridge));
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
