// The Node binding: a thin layer that maps the core's Model and Session to JS classes. Long work
// (loading, forward passes) runs on libuv's worker pool and resolves a Promise; core errors become
// JS Errors with the core's message.
#pragma once

#include <napi.h>

#include <atomic>
#include <memory>

#include "core/model.h"
#include "core/session.h"

namespace moelens::binding {

class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static Napi::Function Init(Napi::Env env);
  static Napi::Object Wrap(Napi::Env env, std::shared_ptr<Model> model);
  explicit ModelWrap(const Napi::CallbackInfo& info);
  std::shared_ptr<Model> model() const { return model_; }

 private:
  Napi::Value Config(const Napi::CallbackInfo& info);
  Napi::Value NewSession(const Napi::CallbackInfo& info);
  Napi::Value Info(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value Unembed(const Napi::CallbackInfo& info);
  Napi::Value HookPoints(const Napi::CallbackInfo& info);
  const Model& checked(Napi::Env env) const;
  std::shared_ptr<Model> model_;
};

class SessionWrap : public Napi::ObjectWrap<SessionWrap> {
 public:
  static Napi::Function Init(Napi::Env env);
  static Napi::Object Wrap(Napi::Env env, std::shared_ptr<Model> model, std::unique_ptr<Session> session);
  explicit SessionWrap(const Napi::CallbackInfo& info);
  void Finalize(Napi::Env env) override;

 private:
  Napi::Value Forward(const Napi::CallbackInfo& info);
  Napi::Value DecodeGreedy(const Napi::CallbackInfo& info);
  Napi::Value Reset(const Napi::CallbackInfo& info);
  Napi::Value Fork(const Napi::CallbackInfo& info);
  Napi::Value Cancel(const Napi::CallbackInfo& info);
  Napi::Value DeltaNetState(const Napi::CallbackInfo& info);
  Napi::Value Position(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value MemoryBytes(const Napi::CallbackInfo& info);
  void check_idle(Napi::Env env) const;
  // Tells V8 how much native memory this session holds, so that garbage collection of dropped
  // sessions is scheduled by their real size and not by their small JS wrappers.
  void report_memory(Napi::Env env);

  friend class ForwardWorker;
  std::shared_ptr<Model> model_;  // keeps the weights alive while the session exists
  std::unique_ptr<Session> session_;
  std::atomic<bool> busy_{false};
  int64_t reported_bytes_ = 0;
  std::atomic<bool> cancel_{false};
};

// Constructors kept for ObjectWrap::New from C++.
struct Constructors {
  Napi::FunctionReference model, session;
};

}  // namespace moelens::binding
