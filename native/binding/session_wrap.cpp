#include <cstring>

#include "wraps.h"

namespace moelens::binding {

namespace {

// Hands a vector's storage to JS without a copy.
template <class T, class Array>
Array to_typed_array(Napi::Env env, std::vector<T>&& v) {
  auto* heap = new std::vector<T>(std::move(v));
  auto buf = Napi::ArrayBuffer::New(env, heap->data(), heap->size() * sizeof(T),
                                    [](Napi::Env, void*, std::vector<T>* p) { delete p; }, heap);
  return Array::New(env, heap->size(), buf, 0);
}

}  // namespace

class ForwardWorker : public Napi::AsyncWorker {
 public:
  ForwardWorker(Napi::Env env, SessionWrap* owner, Napi::Object owner_obj, std::vector<int32_t> ids,
                ForwardOptions options)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), owner_(owner), ids_(std::move(ids)),
        options_(options) {
    owner_ref_ = Napi::Persistent(owner_obj);  // keep the session alive while the work runs
  }
  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      result_ = owner_->session_->forward(ids_.data(), int(ids_.size()), options_);
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    owner_->busy_ = false;
    Napi::Object o = Napi::Object::New(env);
    o.Set("n", Napi::Number::New(env, result_.n));
    o.Set("logitsRows", Napi::Number::New(env, result_.logits_rows));
    o.Set("logits", to_typed_array<float, Napi::Float32Array>(env, std::move(result_.logits)));
    if (options_.capture.router) {
      o.Set("routerLogits", to_typed_array<float, Napi::Float32Array>(env, std::move(result_.router_logits)));
      o.Set("routerIds", to_typed_array<int32_t, Napi::Int32Array>(env, std::move(result_.router_ids)));
      o.Set("routerWeights", to_typed_array<float, Napi::Float32Array>(env, std::move(result_.router_weights)));
    }
    if (options_.capture.residual)
      o.Set("residual", to_typed_array<float, Napi::Float32Array>(env, std::move(result_.residual)));
    deferred_.Resolve(o);
  }

  void OnError(const Napi::Error& e) override {
    owner_->busy_ = false;
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  SessionWrap* owner_;
  Napi::ObjectReference owner_ref_;
  std::vector<int32_t> ids_;
  ForwardOptions options_;
  ForwardResult result_;
};

Napi::Function SessionWrap::Init(Napi::Env env) {
  return DefineClass(env, "NativeSession",
                     {InstanceMethod<&SessionWrap::Forward>("forward"), InstanceMethod<&SessionWrap::Reset>("reset"),
                      InstanceMethod<&SessionWrap::Fork>("fork"), InstanceMethod<&SessionWrap::Cancel>("cancel"),
                      InstanceAccessor<&SessionWrap::Position>("position")});
}

Napi::Object SessionWrap::Wrap(Napi::Env env, std::shared_ptr<Model> model, std::unique_ptr<Session> session) {
  Napi::Object obj = env.GetInstanceData<Constructors>()->session.New({});
  SessionWrap* w = Unwrap(obj);
  w->model_ = std::move(model);
  w->session_ = std::move(session);
  return obj;
}

SessionWrap::SessionWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SessionWrap>(info) {}

void SessionWrap::check_idle(Napi::Env env) const {
  if (!session_) throw Napi::Error::New(env, "session is not initialised");
  if (busy_) throw Napi::Error::New(env, "session is busy: await the previous prefill/decode before starting another");
}

Napi::Value SessionWrap::Forward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  check_idle(env);
  if (info.Length() < 1 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    throw Napi::TypeError::New(env, "forward(ids, options): ids must be an Int32Array");
  Napi::Int32Array ids = info[0].As<Napi::Int32Array>();
  std::vector<int32_t> copy(ids.Data(), ids.Data() + ids.ElementLength());
  ForwardOptions opt;
  if (info.Length() > 1 && info[1].IsObject()) {
    Napi::Object o = info[1].As<Napi::Object>();
    if (o.Has("logits")) {
      std::string mode = o.Get("logits").ToString();
      if (mode == "all") opt.logits = LogitsMode::All;
      else if (mode == "last") opt.logits = LogitsMode::Last;
      else if (mode == "none") opt.logits = LogitsMode::None;
      else throw Napi::TypeError::New(env, "options.logits must be 'all', 'last' or 'none'");
    }
    opt.capture.router = o.Has("router") && o.Get("router").ToBoolean();
    opt.capture.residual = o.Has("residual") && o.Get("residual").ToBoolean();
  }
  cancel_ = false;
  opt.cancel = &cancel_;
  busy_ = true;
  auto* worker = new ForwardWorker(env, this, info.This().As<Napi::Object>(), std::move(copy), opt);
  Napi::Promise p = worker->promise();
  worker->Queue();
  return p;
}

Napi::Value SessionWrap::Reset(const Napi::CallbackInfo& info) {
  check_idle(info.Env());
  session_->reset();
  return info.Env().Undefined();
}

Napi::Value SessionWrap::Fork(const Napi::CallbackInfo& info) {
  check_idle(info.Env());
  return Wrap(info.Env(), model_, session_->fork());
}

Napi::Value SessionWrap::Cancel(const Napi::CallbackInfo& info) {
  cancel_ = true;
  return info.Env().Undefined();
}

Napi::Value SessionWrap::Position(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), session_ ? session_->position() : 0);
}

}  // namespace moelens::binding
