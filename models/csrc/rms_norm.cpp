// Fused RMSNorm for float32 and bfloat16 CPU tensors (float32 weight, float32 sums): one pass forward, one pass backward (plus a reduction of
// the weight gradient), registered as the torch ops normlab::rms_norm_forward / _backward.
//
//   forward:  s = 1 / sqrt(mean(x^2) + eps),  y = x * s * w        (per row of `dim` features)
//   backward: n = x * s,  dx = s * (g w - n * mean(g w n)),  dw = sum over rows of g n
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>

namespace {

void check(const at::Tensor& x, const at::Tensor& weight) {
  const auto t = x.scalar_type();
  TORCH_CHECK(x.device().is_cpu() && (t == at::kFloat || t == at::kBFloat16),
              "normlab rms_norm: float32 or bfloat16 CPU input");
  TORCH_CHECK(weight.dim() == 1 && x.size(-1) == weight.numel(), "normlab rms_norm: weight must match the last dim");
  TORCH_CHECK(weight.scalar_type() == at::kFloat, "normlab rms_norm: float32 weight");
}

int64_t grain(int64_t dim) { return std::max<int64_t>(1, 32768 / dim); }  // rows per task

// Loads to float and stores from float, written with bit operations for bfloat16 so that the
// compiler vectorizes the loops (bfloat16 is the top half of a float; stores round to nearest even).
inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const at::BFloat16* p, int64_t i) {
  const uint32_t u = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[i]) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(at::BFloat16* p, int64_t i, float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
}

// T: the input's type (float or bfloat16); the weight, rstd and all sums are float.
template <typename T>
void forward_rows(const T* xp, const float* wp, T* yp, float* sp, int64_t rows, int64_t dim, float eps) {
  at::parallel_for(0, rows, grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = xp + r * dim;
      T* yr = yp + r * dim;
      float ss = 0.f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < dim; ++i) {
        const float v = load(xr, i);
        ss += v * v;
      }
      const float s = 1.f / std::sqrt(ss / dim + eps);
      sp[r] = s;
#pragma omp simd
      for (int64_t i = 0; i < dim; ++i) store(yr, i, load(xr, i) * s * wp[i]);
    }
  });
}

// Each task sums its rows' weight gradient into its own row of `partial` (tasks x dim); the
// caller adds those rows in order, so the result depends only on the row count and dim.
template <typename T>
void backward_rows(const T* gp, const T* xp, const float* wp, const float* sp, T* dxp, float* pp,
                   int64_t rows, int64_t dim) {
  const int64_t g = grain(dim), tasks = (rows + g - 1) / g;
  at::parallel_for(0, tasks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      float* dw = pp + t * dim;
      for (int64_t r = t * g; r < std::min(rows, (t + 1) * g); ++r) {
        const T* gr = gp + r * dim;
        const T* xr = xp + r * dim;
        T* dxr = dxp + r * dim;
        const float s = sp[r];
        float dot = 0.f;  // sum of g w x
#pragma omp simd reduction(+ : dot)
        for (int64_t i = 0; i < dim; ++i) dot += load(gr, i) * wp[i] * load(xr, i);
        const float c = dot * s * s / dim;  // mean(g w n) / s, since n = x s
#pragma omp simd
        for (int64_t i = 0; i < dim; ++i) {
          const float gi = load(gr, i), xi = load(xr, i);
          store(dxr, i, s * (gi * wp[i] - xi * c));
          dw[i] += gi * xi * s;
        }
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check(x, weight);
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  const int64_t dim = wc.numel(), rows = xc.numel() / dim;
  at::Tensor y = at::empty_like(xc);
  at::Tensor rstd = at::empty({rows}, xc.options().dtype(at::kFloat));
  const float e = static_cast<float>(eps);
  if (xc.scalar_type() == at::kFloat) {
    forward_rows(xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(), rstd.data_ptr<float>(), rows, dim, e);
  } else {
    forward_rows(xc.data_ptr<at::BFloat16>(), wc.data_ptr<float>(), y.data_ptr<at::BFloat16>(),
                 rstd.data_ptr<float>(), rows, dim, e);
  }
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& rstd) {
  check(x, weight);
  const at::Tensor gc = grad.to(x.scalar_type()).contiguous(), xc = x.contiguous();
  const at::Tensor wc = weight.contiguous(), sc = rstd.contiguous();
  const int64_t dim = wc.numel(), rows = xc.numel() / dim, g = grain(dim);
  at::Tensor dx = at::empty_like(xc);
  at::Tensor partial = at::zeros({std::max<int64_t>((rows + g - 1) / g, 1), dim}, wc.options());
  if (xc.scalar_type() == at::kFloat) {
    backward_rows(gc.data_ptr<float>(), xc.data_ptr<float>(), wc.data_ptr<float>(), sc.data_ptr<float>(),
                  dx.data_ptr<float>(), partial.data_ptr<float>(), rows, dim);
  } else {
    backward_rows(gc.data_ptr<at::BFloat16>(), xc.data_ptr<at::BFloat16>(), wc.data_ptr<float>(),
                  sc.data_ptr<float>(), dx.data_ptr<at::BFloat16>(), partial.data_ptr<float>(), rows, dim);
  }
  return {dx, partial.sum(0)};
}

}  // namespace

TORCH_LIBRARY(normlab, m) {
  m.def("rms_norm_forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(normlab, CPU, m) {
  m.impl("rms_norm_forward", &rms_norm_forward);
  m.impl("rms_norm_backward", &rms_norm_backward);
}
