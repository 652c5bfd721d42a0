// Fused RMSNorm for float32 CPU tensors: one pass forward, one pass backward (plus a reduction of
// the weight gradient), registered as the torch ops normlab::rms_norm_forward / _backward.
//
//   forward:  s = 1 / sqrt(mean(x^2) + eps),  y = x * s * w        (per row of `dim` features)
//   backward: n = x * s,  dx = s * (g w - n * mean(g w n)),  dw = sum over rows of g n
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

namespace {

void check(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat, "normlab rms_norm: float32 CPU input");
  TORCH_CHECK(weight.dim() == 1 && x.size(-1) == weight.numel(), "normlab rms_norm: weight must match the last dim");
  TORCH_CHECK(weight.scalar_type() == at::kFloat, "normlab rms_norm: float32 weight");
}

int64_t grain(int64_t dim) { return std::max<int64_t>(1, 32768 / dim); }  // rows per task

std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check(x, weight);
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  const int64_t dim = wc.numel(), rows = xc.numel() / dim;
  at::Tensor y = at::empty_like(xc);
  at::Tensor rstd = at::empty({rows}, xc.options());
  const float* xp = xc.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  float* sp = rstd.data_ptr<float>();
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows, grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xp + r * dim;
      float* yr = yp + r * dim;
      float ss = 0.f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
      const float s = 1.f / std::sqrt(ss / dim + e);
      sp[r] = s;
#pragma omp simd
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * s * wp[i];
    }
  });
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& rstd) {
  check(x, weight);
  const at::Tensor gc = grad.contiguous(), xc = x.contiguous(), wc = weight.contiguous();
  const int64_t dim = wc.numel(), rows = xc.numel() / dim;
  at::Tensor dx = at::empty_like(xc);
  // Each task sums its rows' weight gradient into its own row of `partial`; the rows of
  // `partial` are then added in order, so the result depends only on the thread count.
  const int64_t g = grain(dim), tasks = rows == 0 ? 0 : (rows + g - 1) / g;
  at::Tensor partial = at::zeros({std::max<int64_t>(tasks, 1), dim}, xc.options());
  const float* gp = gc.data_ptr<float>();
  const float* xp = xc.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  const float* sp = rstd.contiguous().data_ptr<float>();
  float* dxp = dx.data_ptr<float>();
  float* pp = partial.data_ptr<float>();
  at::parallel_for(0, tasks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      float* dw = pp + t * dim;
      for (int64_t r = t * g; r < std::min(rows, (t + 1) * g); ++r) {
        const float* gr = gp + r * dim;
        const float* xr = xp + r * dim;
        float* dxr = dxp + r * dim;
        const float s = sp[r];
        float dot = 0.f;  // sum of g w x
#pragma omp simd reduction(+ : dot)
        for (int64_t i = 0; i < dim; ++i) dot += gr[i] * wp[i] * xr[i];
        const float c = dot * s * s / dim;  // mean(g w n) / s, since n = x s
#pragma omp simd
        for (int64_t i = 0; i < dim; ++i) {
          dxr[i] = s * (gr[i] * wp[i] - xr[i] * c);
          dw[i] += gr[i] * xr[i] * s;
        }
      }
    }
  });
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
