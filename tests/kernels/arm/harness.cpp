// The Arm kernels' test program: cross-compiled with aarch64-linux-gnu-g++ -static and
// -DOMNI_CPU_STANDALONE (no libtorch) beside csrc/'s NEON GEMVs and shared files, one binary
// per -march variant, and run under qemu-aarch64 by tests/kernels/test_arm_kernels.py.
//
// usage: harness <case folder>. The folder holds what the pytest file wrote with
// omni_cpu/kernels/packing.py (so the packed layout is the one Python packs for x86 too):
// cases.txt, one case a line "<kernel> <name> <mode> <tolerance> key=value...", and the
// case's arrays as raw little-endian files <name>.<array>, the reference (float64) among
// them. Each case runs its kernel on the packed weights and compares with the reference the
// way the x86 test of that kernel does (mode). Prints one line per case and a last line
// "<variant>: N passed, M failed"; exits 0 when none failed, 1 when some did, 3 without
// running anything when this CPU lacks an extension the binary was built for (the runtime
// dispatch would not choose it there: build.py's ARM_BUILDS isa).

#include <sys/auxv.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gemv.h"
#include "neon_dot.h"

const char* omni_cpu_neon_variant();  // gemv_neon_bf16_int8.cpp

namespace {

using omni_cpu::BF16;

// Linux's aarch64 hwcap bits (asm/hwcap.h), named as /proc/cpuinfo's Features.
constexpr unsigned long kAsimddp = 1ul << 20;  // AT_HWCAP
constexpr unsigned long kI8mm = 1ul << 13;     // AT_HWCAP2
constexpr unsigned long kBf16 = 1ul << 14;     // AT_HWCAP2

// The extension this binary was built for that the CPU lacks, or "".
std::string missing_extension() {
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  (void)hwcap;
  (void)hwcap2;
#if defined(__ARM_FEATURE_DOTPROD)
  if (!(hwcap & kAsimddp)) return "asimddp";
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
  if (!(hwcap2 & kI8mm)) return "i8mm";
#endif
#if defined(OMNI_CPU_NEON_BFDOT)
  if (!(hwcap2 & kBf16)) return "bf16";
#endif
  return "";
}

struct Case {
  std::string kernel, name, mode;
  double tolerance = 0;
  std::map<std::string, std::string> params;
  std::string folder;

  int64_t integer(const std::string& key) const { return std::stoll(params.at(key)); }
  std::string text(const std::string& key) const { return params.at(key); }
  template <typename T>
  std::vector<T> array(const std::string& what, int64_t count) const {
    // A case may read its packed weights from an earlier case's files ("weights=<name>").
    const bool shared = params.count("weights") && (what == "w" || what == "wscale" ||
                                                     what == "scales");
    const std::string path = folder + "/" + (shared ? params.at("weights") : name) + "." + what;
    std::ifstream in(path, std::ios::binary);
    std::vector<T> data(count);
    in.read(reinterpret_cast<char*>(data.data()), count * static_cast<int64_t>(sizeof(T)));
    if (in.gcount() != count * static_cast<int64_t>(sizeof(T)))
      throw std::runtime_error("short or missing " + path);
    return data;
  }
};

template <typename T>
std::vector<double> widened(const std::vector<T>& values) {
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<float>(values[i]);
  return out;
}

// The case's verdict on got against the reference: its error and whether it is within bound.
std::pair<double, bool> compare(const Case& c, const std::vector<double>& got,
                                const std::vector<double>& want) {
  if (got.size() != want.size()) return {INFINITY, false};
  if (c.mode == "rel") {  // ||got - want|| / ||want|| (tests/helpers/tensors.relative)
    double diff = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      diff += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
    const double error = std::sqrt(diff / norm);
    return {error, error < c.tolerance};
  }
  if (c.mode == "abs") {  // max |got - want|
    double error = 0;
    for (size_t i = 0; i < got.size(); ++i) error = std::max(error, std::fabs(got[i] - want[i]));
    return {error, error < c.tolerance};
  }
  if (c.mode == "elem") {  // every |got - want| <= tolerance |want| + atol (torch.allclose)
    const double atol = std::stod(c.params.at("atol"));
    double worst = 0;
    bool ok = true;
    for (size_t i = 0; i < got.size(); ++i) {
      const double error = std::fabs(got[i] - want[i]);
      worst = std::max(worst, error);
      ok = ok && error <= c.tolerance * std::fabs(want[i]) + atol;
    }
    return {worst, ok};
  }
  throw std::runtime_error("unknown mode " + c.mode);
}

// x [M, K] as the case stores it (float32 or bf16), for the kernels that take either.
template <typename In, typename Out, typename Product>
std::vector<double> rows_product(const Case& c, int64_t M, int64_t K, int64_t N,
                                 Product product) {
  const std::vector<In> x = c.array<In>("x", M * K);
  std::vector<float> bias;
  if (c.integer("bias")) bias = c.array<float>("bias", N);
  std::vector<Out> out(M * N);
  product(x.data(), bias.empty() ? nullptr : bias.data(), out.data());
  return widened(out);
}

template <typename In, typename Out>
std::vector<double> run_w8a8(const Case& c) {
  const int64_t M = c.integer("M"), K = c.integer("K"), N = c.integer("N");
  const auto w = c.array<int8_t>("w", N * K);
  const auto wscale = c.array<float>("wscale", N);
  return rows_product<In, Out>(c, M, K, N, [&](const In* x, const float* bias, Out* out) {
    std::vector<int8_t> q(M * K);
    std::vector<float> scales(M);
    omni_cpu::quantize_s8_rows<In>(x, M, K, q.data(), scales.data());
    omni_cpu::w8a8_product_s8<Out>(q.data(), scales.data(), w.data(), wscale.data(), M, K, N,
                                   bias, out);
  });
}

template <typename In, typename Out>
std::vector<double> run_w4a8(const Case& c) {
  const int64_t M = c.integer("M"), K = c.integer("K"), N = c.integer("N");
  const auto w = c.array<uint8_t>("w", N * K / 2);
  const auto scales = c.array<BF16>("scales", N * K / 32 * 2);
  return rows_product<In, Out>(c, M, K, N, [&](const In* x, const float* bias, Out* out) {
    std::vector<int8_t> q(M * K);
    std::vector<float> xscale(M);
    std::vector<int32_t> xsum(M * K / 32);
    omni_cpu::quantize_s8<In>(x, M, K, q.data(), xscale.data(), xsum.data());
    omni_cpu::w4a8_product<Out>(q.data(), xscale.data(), xsum.data(), w.data(), scales.data(),
                                M, K, N, bias, out);
  });
}

template <typename Out>
std::vector<double> run_bf16(const Case& c) {
  const int64_t M = c.integer("M"), K = c.integer("K"), N = c.integer("N");
  const auto w = c.array<BF16>("w", N * K);
  return rows_product<float, Out>(c, M, K, N, [&](const float* x, const float* bias, Out* out) {
    omni_cpu::bf16_product_f32<Out>(x, w.data(), M, K, N, bias, out);
  });
}

template <typename T>
std::vector<double> run_attention(const Case& c) {
  const int64_t B = c.integer("B"), H = c.integer("H"), G = c.integer("G"), S = c.integer("S"),
                D = c.integer("D"), end = c.integer("end");
  const auto q = c.array<T>("q", B * H * D);
  const auto keys = c.array<T>("keys", B * G * S * D);
  const auto values = c.array<T>("values", B * G * S * D);
  std::vector<T> out(B * H * D);
  omni_cpu::attend_positions<T>(q.data(), keys.data(), values.data(), out.data(), B, H, G, S, D,
                                end, static_cast<float>(std::stod(c.text("scale"))));
  return widened(out);
}

// SnakeBeta's output after the tail; the tail itself must come back bit for bit.
template <typename T>
std::vector<double> run_snake(const Case& c, bool& tail_kept) {
  const int64_t B = c.integer("B"), L = c.integer("L"), C = c.integer("C"),
                keep = c.integer("keep");
  const auto x = c.array<T>("x", B * L * C);
  const auto alpha = c.array<float>("alpha", C);
  const auto inv_beta = c.array<float>("inv_beta", C);
  std::vector<T> tail;
  if (keep) tail = c.array<T>("tail", B * keep * C);
  std::vector<T> out(B * (keep + L) * C);
  omni_cpu::snake_rows<T>(x.data(), alpha.data(), inv_beta.data(), keep ? tail.data() : nullptr,
                          out.data(), B, L, C, keep);
  std::vector<double> after;
  tail_kept = true;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < keep * C; ++i) {
      const float kept = out[b * (keep + L) * C + i], given = tail[b * keep * C + i];
      tail_kept = tail_kept && kept == given;
    }
    for (int64_t i = keep * C; i < (keep + L) * C; ++i)
      after.push_back(static_cast<float>(out[b * (keep + L) * C + i]));
  }
  return after;
}

std::vector<double> run(const Case& c, bool& extra_ok) {
  extra_ok = true;
  const bool in_bf16 = c.params.count("in") && c.text("in") == "bf16";
  const bool out_bf16 = c.params.count("out") && c.text("out") == "bf16";
  if (c.kernel == "bf16") return out_bf16 ? run_bf16<BF16>(c) : run_bf16<float>(c);
  if (c.kernel == "w8a8") {
    if (in_bf16) return out_bf16 ? run_w8a8<BF16, BF16>(c) : run_w8a8<BF16, float>(c);
    return out_bf16 ? run_w8a8<float, BF16>(c) : run_w8a8<float, float>(c);
  }
  if (c.kernel == "w4a8") {
    if (in_bf16) return out_bf16 ? run_w4a8<BF16, BF16>(c) : run_w4a8<BF16, float>(c);
    return out_bf16 ? run_w4a8<float, BF16>(c) : run_w4a8<float, float>(c);
  }
  if (c.kernel == "attention") return in_bf16 ? run_attention<BF16>(c) : run_attention<float>(c);
  if (c.kernel == "snake")
    return in_bf16 ? run_snake<BF16>(c, extra_ok) : run_snake<float>(c, extra_ok);
  throw std::runtime_error("unknown kernel " + c.kernel);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string variant = omni_cpu_neon_variant();
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <case folder>\n", argv[0]);
    return 2;
  }
  const std::string missing = missing_extension();
  if (!missing.empty()) {
    std::printf("%s: refused: this CPU lacks %s\n", variant.c_str(), missing.c_str());
    return 3;
  }
  std::ifstream list(std::string(argv[1]) + "/cases.txt");
  if (!list) {
    std::fprintf(stderr, "no cases.txt in %s\n", argv[1]);
    return 2;
  }
  int passed = 0, failed = 0;
  for (std::string line; std::getline(list, line);) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    Case c;
    c.folder = argv[1];
    fields >> c.kernel >> c.name >> c.mode >> c.tolerance;
    for (std::string pair; fields >> pair;) {
      const size_t at = pair.find('=');
      c.params[pair.substr(0, at)] = pair.substr(at + 1);
    }
    try {
      bool extra_ok = true;
      const std::vector<double> got = run(c, extra_ok);
      const auto want = c.array<double>("want", static_cast<int64_t>(got.size()));
      const auto [error, ok] = compare(c, got, want);
      const bool good = ok && extra_ok;
      std::printf("%s %s %.3g%s\n", good ? "ok" : "FAIL", c.name.c_str(), error,
                  extra_ok ? "" : " (tail changed)");
      (good ? passed : failed) += 1;
    } catch (const std::exception& error) {
      std::printf("FAIL %s %s\n", c.name.c_str(), error.what());
      failed += 1;
    }
  }
  std::printf("%s: %d passed, %d failed\n", variant.c_str(), passed, failed);
  return failed ? 1 : 0;
}
