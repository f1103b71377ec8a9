// llama-probe: runs llama.cpp on a GGUF with given token ids (no tokenizer involved) and prints one JSON
// line with the greedy continuation; optionally writes every prompt position's logits, then each decode
// step's, as raw float32 [rows, vocab] so they can be compared with moelens on the same weights.
// Built by scripts/peer/build-llama-cpp.sh against the llama.cpp build it makes.
// Usage: llama-probe MODEL.gguf --ids 1,2,3 [--decode N] [--threads N] [--logits OUT.f32]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

namespace {

void usage() {
  std::fprintf(stderr, "usage: llama-probe MODEL.gguf --ids 1,2,3 [--decode N] [--threads N] [--logits OUT.f32]\n");
}

std::vector<llama_token> parse_ids(const std::string& text) {
  std::vector<llama_token> ids;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    ids.push_back(llama_token(std::atoi(text.substr(start, end - start).c_str())));
    start = end + 1;
  }
  return ids;
}

int argmax(const float* v, int n) { return int(std::max_element(v, v + n) - v); }

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  std::string model_path = argv[1], ids_text, logits_path;
  int decode = 0, threads = 2;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--ids") ids_text = argv[i + 1];
    else if (k == "--decode") decode = std::atoi(argv[i + 1]);
    else if (k == "--threads") threads = std::atoi(argv[i + 1]);
    else if (k == "--logits") logits_path = argv[i + 1];
    else {
      usage();
      return 2;
    }
  }
  std::vector<llama_token> ids = parse_ids(ids_text);
  if (ids.empty()) {
    std::fprintf(stderr, "llama-probe: --ids is empty\n");
    return 2;
  }

  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.progress_callback = [](float, void*) { return true; };  // no progress dots
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) {
    std::fprintf(stderr, "llama-probe: cannot load %s\n", model_path.c_str());
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t(ids.size() + decode + 16);
  cp.n_batch = cp.n_ubatch = uint32_t(ids.size());
  cp.n_threads = cp.n_threads_batch = threads;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "llama-probe: cannot create a context\n");
    return 1;
  }

  FILE* logits_file = logits_path.empty() ? nullptr : std::fopen(logits_path.c_str(), "wb");
  // Every prompt position outputs logits, so all of them can be compared.
  llama_batch batch = llama_batch_init(int32_t(ids.size()), 0, 1);
  batch.n_tokens = int32_t(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = llama_pos(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama-probe: prefill failed\n");
    return 1;
  }
  if (logits_file)
    for (size_t i = 0; i < ids.size(); ++i) std::fwrite(llama_get_logits_ith(ctx, int32_t(i)), sizeof(float), vocab, logits_file);
  int next = argmax(llama_get_logits_ith(ctx, -1), vocab);
  std::string tokens;
  for (int i = 0; i < decode; ++i) {
    tokens += (i ? "," : "") + std::to_string(next);
    batch.n_tokens = 1;
    batch.token[0] = next;
    batch.pos[0] = llama_pos(ids.size() + i);
    batch.logits[0] = 1;
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama-probe: decode step %d failed\n", i);
      return 1;
    }
    const float* logits = llama_get_logits_ith(ctx, -1);
    if (logits_file) std::fwrite(logits, sizeof(float), vocab, logits_file);
    next = argmax(logits, vocab);
  }
  if (logits_file) std::fclose(logits_file);
  std::printf("{\"vocab\":%d,\"prompt_tokens\":%zu,\"tokens\":[%s]}\n", vocab, ids.size(), tokens.c_str());
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
