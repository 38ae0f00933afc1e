#include "common/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": rope_scaling: ", what));
}

// Reads rope_scaling.<key> as a number into *out; `required` fields must be present.
absl::Status ReadNumber(const Json& j, absl::string_view source, absl::string_view type,
                        const char* key, bool required, double* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!required) return absl::OkStatus();
    return Invalid(source, absl::StrCat("rope_type \"", type, "\" needs field \"", key, "\""));
  }
  if (!it->is_number()) {
    return Invalid(source, absl::StrCat("field \"", key, "\" must be a number, got ", it->dump()));
  }
  *out = it->get<double>();
  if (!std::isfinite(*out)) {
    return Invalid(source, absl::StrCat("field \"", key, "\" must be finite"));
  }
  return absl::OkStatus();
}

absl::Status Positive(absl::string_view source, const char* key, double v) {
  if (v > 0) return absl::OkStatus();
  return Invalid(source, absl::StrCat("field \"", key, "\" must be positive, got ", v));
}

}  // namespace

std::string RopeScaling::TypeName() const {
  switch (type) {
    case Type::kDefault: return "default";
    case Type::kLinear: return "linear";
    case Type::kDynamic: return "dynamic";
    case Type::kLlama3: return "llama3";
    case Type::kYarn: return "yarn";
  }
  return "default";
}

absl::StatusOr<RopeScaling> RopeScaling::FromJson(const Json& j, absl::string_view source) {
  RopeScaling r;
  if (j.is_null()) return r;
  if (!j.is_object()) return Invalid(source, "must be an object or null, got " + j.dump());
  // transformers renamed "type" to "rope_type"; both appear in published configs.
  auto it = j.find("rope_type");
  if (it == j.end() || it->is_null()) it = j.find("type");
  if (it == j.end() || it->is_null()) return Invalid(source, "missing field \"rope_type\"");
  if (!it->is_string()) return Invalid(source, "field \"rope_type\" must be a string");
  const std::string type = it->get<std::string>();
  if (type == "default") {
    r.type = Type::kDefault;
  } else if (type == "linear") {
    r.type = Type::kLinear;
  } else if (type == "dynamic") {
    r.type = Type::kDynamic;
  } else if (type == "llama3") {
    r.type = Type::kLlama3;
  } else if (type == "yarn") {
    r.type = Type::kYarn;
  } else {
    return Invalid(source, absl::StrCat("unsupported rope_type \"", type,
                                        "\" (supported: default, linear, dynamic, llama3, yarn)"));
  }
  if (auto p = j.find("partial_rotary_factor");
      p != j.end() && !p->is_null() && !(p->is_number() && p->get<double>() == 1.0)) {
    return Invalid(source, "partial_rotary_factor " + p->dump() +
                               " is not supported (only 1: RoPE over the whole head)");
  }
  if (r.type == Type::kDefault) return r;

  absl::Status s;
  s.Update(ReadNumber(j, source, type, "factor", true, &r.factor));
  double original = 0;
  const bool needs_original = r.type == Type::kLlama3;
  s.Update(ReadNumber(j, source, type, "original_max_position_embeddings", needs_original,
                      &original));
  if (r.type == Type::kLlama3) {
    s.Update(ReadNumber(j, source, type, "low_freq_factor", true, &r.low_freq_factor));
    s.Update(ReadNumber(j, source, type, "high_freq_factor", true, &r.high_freq_factor));
  }
  if (r.type == Type::kYarn) {
    s.Update(ReadNumber(j, source, type, "beta_fast", false, &r.beta_fast));
    s.Update(ReadNumber(j, source, type, "beta_slow", false, &r.beta_slow));
    s.Update(ReadNumber(j, source, type, "mscale", false, &r.mscale));
    s.Update(ReadNumber(j, source, type, "mscale_all_dim", false, &r.mscale_all_dim));
    s.Update(ReadNumber(j, source, type, "attention_factor", false, &r.attention_factor));
    if (auto t = j.find("truncate"); t != j.end() && !t->is_null()) {
      if (!t->is_boolean()) return Invalid(source, "field \"truncate\" must be a boolean");
      r.truncate = t->get<bool>();
    }
  }
  if (!s.ok()) return s;
  if (original < 0 || original > (1 << 30) || original != std::floor(original)) {
    return Invalid(source, absl::StrCat("field \"original_max_position_embeddings\" must be a "
                                        "positive integer, got ", original));
  }
  r.original_max_position_embeddings = static_cast<int>(original);
  {
    absl::Status p = Positive(source, "factor", r.factor);
    if (p.ok() && needs_original) {
      p = Positive(source, "original_max_position_embeddings", original);
    }
    if (p.ok() && r.type == Type::kLlama3) {
      p = Positive(source, "low_freq_factor", r.low_freq_factor);
      if (p.ok() && !(r.high_freq_factor > r.low_freq_factor)) {
        p = Invalid(source, absl::StrCat("high_freq_factor ", r.high_freq_factor,
                                         " must exceed low_freq_factor ", r.low_freq_factor));
      }
    }
    if (p.ok() && r.type == Type::kYarn) {
      p = Positive(source, "beta_fast", r.beta_fast);
      if (p.ok()) p = Positive(source, "beta_slow", r.beta_slow);
      if (p.ok() && r.attention_factor < 0) {
        p = Invalid(source, "field \"attention_factor\" must be positive");
      }
    }
    if (!p.ok()) return p;
  }
  return r;
}

Json RopeScaling::ToJson() const {
  if (type == Type::kDefault) return nullptr;
  Json j;
  j["rope_type"] = TypeName();
  j["factor"] = factor;
  if (type == Type::kLlama3) {
    j["low_freq_factor"] = low_freq_factor;
    j["high_freq_factor"] = high_freq_factor;
  }
  if (original_max_position_embeddings > 0) {
    j["original_max_position_embeddings"] = original_max_position_embeddings;
  }
  if (type == Type::kYarn) {
    j["beta_fast"] = beta_fast;
    j["beta_slow"] = beta_slow;
    if (mscale != 0) j["mscale"] = mscale;
    if (mscale_all_dim != 0) j["mscale_all_dim"] = mscale_all_dim;
    if (attention_factor != 0) j["attention_factor"] = attention_factor;
    if (!truncate) j["truncate"] = false;
  }
  return j;
}

RopeFrequencies ComputeRopeFrequencies(const RopeScaling& r, int head_dim, double theta,
                                       int max_position_embeddings) {
  const int half = head_dim / 2;
  const double dim = head_dim;
  double base = theta;
  if (r.type == RopeScaling::Type::kDynamic) {
    // transformers' formula at seq_len = max_position_embeddings * factor (see the header).
    const double seq_len = max_position_embeddings * r.factor;
    base *= std::pow(r.factor * seq_len / max_position_embeddings - (r.factor - 1),
                     dim / (dim - 2));
  }
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(base, 2.0 * i / dim);

  RopeFrequencies out;
  switch (r.type) {
    case RopeScaling::Type::kDefault:
    case RopeScaling::Type::kDynamic:
      break;
    case RopeScaling::Type::kLinear:
      for (double& f : inv) f /= r.factor;
      break;
    case RopeScaling::Type::kLlama3: {
      // Long wavelengths are interpolated by `factor`, short ones kept, the band between
      // blended linearly in 1 / wavelength.
      const double old_len = r.original_max_position_embeddings;
      const double low_wavelen = old_len / r.low_freq_factor;
      const double high_wavelen = old_len / r.high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= r.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth =
              (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
          f = (1 - smooth) * f / r.factor + smooth * f;
        }
      }
      break;
    }
    case RopeScaling::Type::kYarn: {
      auto get_mscale = [](double scale, double m) {
        return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
      };
      double attention = r.attention_factor;
      if (attention == 0) {
        attention = r.mscale != 0 && r.mscale_all_dim != 0
                        ? get_mscale(r.factor, r.mscale) / get_mscale(r.factor, r.mscale_all_dim)
                        : get_mscale(r.factor, 1.0);
      }
      out.attention_scaling = static_cast<float>(attention);
      const double original = r.original_max_position_embeddings > 0
                                  ? r.original_max_position_embeddings
                                  : max_position_embeddings;
      // The dimension whose wavelength fits `rotations` times into the original context.
      auto correction_dim = [&](double rotations) {
        return dim * std::log(original / (rotations * 2 * std::numbers::pi)) /
               (2 * std::log(theta));
      };
      double low = correction_dim(r.beta_fast);
      double high = correction_dim(r.beta_slow);
      if (r.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1);
      if (low == high) high += 0.001;  // As transformers: avoid dividing by zero.
      for (int i = 0; i < half; ++i) {
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // Weight of the unscaled frequency.
        inv[i] = inv[i] / r.factor * (1 - extrapolation) + inv[i] * extrapolation;
      }
      break;
    }
  }
  out.inv_freq.assign(inv.begin(), inv.end());
  return out;
}

}  // namespace tessera
