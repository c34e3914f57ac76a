// A worker for the end-to-end tests: each mode is one behaviour a real training script can show
// (print its env, fail, crash, ignore SIGTERM and SIGINT, leave a child behind, flood its output).
// Modes that end only some ranks take ONLY_RANK; the other ranks wait until signalled.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

bool selected(int argc, char** argv, int idx) { return argc <= idx || env_int("RANK", -1) == std::atoi(argv[idx]); }

[[noreturn]] void wait_forever() {
  std::printf("ready rank %d\n", env_int("RANK", -1));
  std::fflush(stdout);
  while (true) pause();
}

void write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::perror(path.c_str());
    std::exit(99);
  }
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "env") {
    // Every variable of the torchrun contract, plus the ones dtlaunch narrows.
    const char* keys[] = {"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE",
                          "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                          "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
                          "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"};
    std::string out;
    for (const char* k : keys) {
      const char* v = std::getenv(k);
      out += std::string(k) + "=" + (v ? v : "<unset>") + "\n";
    }
    for (int i = 2; i < argc; ++i) out += std::string("ARG=") + argv[i] + "\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  if (mode == "exit") {  // exit CODE [ONLY_RANK]
    if (selected(argc, argv, 3)) return std::atoi(argv[2]);
    wait_forever();
  }
  if (mode == "signal") {  // signal SIGNUM [ONLY_RANK]
    if (selected(argc, argv, 3)) {
      signal(std::atoi(argv[2]), SIG_DFL);
      raise(std::atoi(argv[2]));
    }
    wait_forever();
  }
  if (mode == "error-file") {  // error-file MESSAGE [ONLY_RANK]: torchrun's JSON, then exit 1
    if (!selected(argc, argv, 3)) wait_forever();
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (!path) return 98;
    std::string json = std::string("{\"message\": {\"message\": \"RuntimeError: ") + argv[2] +
                       "\", \"extraInfo\": {\"py_callstack\": \"Traceback (most recent call last):\\n  "
                       "File \\\"train.py\\\", line 7, in <module>\\nRuntimeError: " +
                       argv[2] + "\", \"timestamp\": \"" + std::to_string(std::time(nullptr)) + "\"}}}";
    write_file(path, json);
    return 1;
  }
  if (mode == "ignore-stop") {  // like a script that catches SIGTERM and Ctrl-C to save a checkpoint
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    wait_forever();
  }
  if (mode == "grandchild") {  // grandchild DIR [exit|setsid]: leaves a sleeping child behind
    pid_t child = fork();
    if (child == 0) {
      if (argc > 3 && std::string(argv[3]) == "setsid") setsid();
      while (true) pause();
    }
    write_file(std::string(argv[2]) + "/" + std::to_string(env_int("RANK", 0)) + ".pid", std::to_string(child));
    if (argc > 3 && std::string(argv[3]) == "exit") return 0;
    wait_forever();
  }
  if (mode == "lines") {  // lines N [TAIL]: N numbered lines; TAIL: a last line without '\n'
    long n = std::atol(argv[2]);
    int rank = env_int("RANK", 0);
    for (long i = 1; i <= n; ++i) std::printf("r%d line %ld\n", rank, i);
    if (argc > 3) std::printf("%s", argv[3]);
    return 0;
  }
  if (mode == "stderr") {  // stderr TEXT: one line on stderr, one on stdout
    std::fprintf(stderr, "%s err\n", argv[2]);
    std::printf("%s out\n", argv[2]);
    return 0;
  }
  if (mode == "touch") {  // touch DIR: a file named by RANK
    write_file(std::string(argv[2]) + "/" + std::to_string(env_int("RANK", -1)), "");
    return 0;
  }
  if (mode == "fail-first") {  // fail-first RANK CODE: that rank fails in attempt 0 only
    std::printf("attempt %d rank %d\n", env_int("TORCHELASTIC_RESTART_COUNT", -1), env_int("RANK", -1));
    std::fflush(stdout);
    if (env_int("TORCHELASTIC_RESTART_COUNT", 0) == 0 && env_int("RANK", -1) == std::atoi(argv[2])) {
      return std::atoi(argv[3]);
    }
    if (env_int("TORCHELASTIC_RESTART_COUNT", 0) == 0) wait_forever();
    return 0;
  }
  if (mode == "pause") wait_forever();
  std::fprintf(stderr, "test_worker: unknown mode '%s'\n", mode.c_str());
  return 64;
}
