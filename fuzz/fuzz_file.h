#ifndef TESSERA_FUZZ_FUZZ_FILE_H_
#define TESSERA_FUZZ_FUZZ_FILE_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

// A per-process scratch folder for the fuzzers whose parsers read files (safetensors,
// tokenizer.json, config.json): each input is written to `name` there, then parsed.
namespace tessera::fuzz {

inline std::filesystem::path ScratchDir() {
  static const std::filesystem::path dir = [] {
    const char* shm = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::filesystem::path d =
        std::filesystem::path(shm) / ("tessera-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::filesystem::path WriteInput(const char* name, const uint8_t* data, size_t size) {
  const std::filesystem::path p = ScratchDir() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p;
}

}  // namespace tessera::fuzz

#endif  // TESSERA_FUZZ_FUZZ_FILE_H_
