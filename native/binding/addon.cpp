// Module entry: loadModel(dir, options, onProgress) -> Promise<NativeModel>.
#include <string>

#include "backends/registry.h"
#include "core/error.h"
#include "wraps.h"

namespace moelens::binding {

namespace {

class LoadWorker : public Napi::AsyncProgressQueueWorker<int32_t> {
 public:
  LoadWorker(Napi::Env env, std::string dir, std::string backend, BackendOptions options, Napi::Function on_progress)
      : Napi::AsyncProgressQueueWorker<int32_t>(env), deferred_(Napi::Promise::Deferred::New(env)), dir_(std::move(dir)),
        backend_(std::move(backend)), options_(std::move(options)) {
    if (!on_progress.IsEmpty()) progress_cb_ = Napi::Persistent(on_progress);
  }
  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute(const ExecutionProgress& progress) override {
    try {
      model_ = Model::load(dir_, make_backend(backend_, options_), [&](int done, int total) {
        int32_t p[2] = {done, total};
        progress.Send(p, 2);
      });
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  void OnProgress(const int32_t* data, size_t count) override {
    if (progress_cb_.IsEmpty() || count < 2) return;
    Napi::Env env = Env();
    progress_cb_.Call({Napi::Number::New(env, data[0]), Napi::Number::New(env, data[1])});
  }
  void OnOK() override { deferred_.Resolve(ModelWrap::Wrap(Env(), std::shared_ptr<Model>(std::move(model_)))); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  Napi::FunctionReference progress_cb_;
  std::string dir_, backend_;
  BackendOptions options_;
  std::unique_ptr<Model> model_;
};

Napi::Value LoadModel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "loadModel(dir, options?, onProgress?): dir must be a string");
  std::string backend = "cpu";
  BackendOptions options;  // empty precision, chunk 0: the backend's defaults
  if (info.Length() > 1 && info[1].IsObject()) {
    Napi::Object o = info[1].As<Napi::Object>();
    if (o.Has("backend") && o.Get("backend").IsString()) backend = o.Get("backend").As<Napi::String>();
    if (o.Has("threads") && o.Get("threads").IsNumber()) options.threads = o.Get("threads").As<Napi::Number>().Int32Value();
    if (o.Has("precision") && o.Get("precision").IsString()) options.precision = o.Get("precision").As<Napi::String>();
    if (o.Has("prefillChunk") && o.Get("prefillChunk").IsNumber())
      options.prefill_chunk = o.Get("prefillChunk").As<Napi::Number>().Int32Value();
    if (o.Has("prefillMinTokens") && o.Get("prefillMinTokens").IsNumber())
      options.prefill_min_tokens = o.Get("prefillMinTokens").As<Napi::Number>().Int32Value();
  }
  Napi::Function cb;
  if (info.Length() > 2 && info[2].IsFunction()) cb = info[2].As<Napi::Function>();
  auto* worker = new LoadWorker(env, info[0].As<Napi::String>(), backend, options, cb);
  Napi::Promise p = worker->promise();
  worker->Queue();
  return p;
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* ctors = new Constructors();
  ctors->model = Napi::Persistent(ModelWrap::Init(env));
  ctors->session = Napi::Persistent(SessionWrap::Init(env));
  env.SetInstanceData(ctors);
  exports.Set("loadModel", Napi::Function::New(env, LoadModel));
  exports.Set("backends", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    Napi::Array a = Napi::Array::New(info.Env());
    const std::vector<std::string> names = backend_names();
    for (size_t i = 0; i < names.size(); ++i) a.Set(uint32_t(i), Napi::String::New(info.Env(), names[i]));
    return a;
  }));
  return exports;
}

}  // namespace moelens::binding

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return moelens::binding::Init(env, exports); }
NODE_API_MODULE(moelens_native, InitModule)
