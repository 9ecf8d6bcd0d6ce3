// bf16 matmul operands with fp32 accumulation, on CPUs with or without bf16 instructions.
//
// A product of two bf16 values (8-bit significands) is exact in fp32 (24-bit significand), so
// an fp32 FMA GEMM over operands rounded to bf16 computes exactly what a bf16 dot-product
// unit with fp32 accumulation (avx512_bf16 VDPBF16PS, AMX) computes, up to the order of the
// fp32 sums. That is how these kernels run on AVX2: operands are rounded (round to nearest
// even, as torch's fp32->bf16 cast does) into caller-owned fp32 scratch, then the fp32 GEMM
// of kernels/gemm.h does the work. Accumulators, biases and outputs stay fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace forge::kernels {

namespace scalar {

// fp32 -> bf16 bits, round to nearest, ties to even; NaN stays NaN (quietened, sign kept),
// +-Inf stays Inf, values past the largest bf16 round to Inf, denormals round like any other
// value (bf16 has fp32's exponent range, so they stay denormal or round up into the normals).
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to the nearest bf16, as an fp32 value.
inline float bf16_round(float x) { return bf16_to_float(bf16_bits(x)); }

// The bf16 linear layer's math on Real (float64 in the tests): the operands of every
// product are first rounded to bf16 (inp, weight, dout), biases and the bias gradient are not.
// Same shapes and conventions as kernels/linear.h; outputs overwritten; dinp, bias, dbias may
// be null.
template <typename Real>
void bf16_linear_forward(Real* out, const float* inp, const float* weight, const float* bias, int N,
                         int IC, int OC);
template <typename Real>
void bf16_linear_backward(Real* dinp, Real* dweight, Real* dbias, const float* dout,
                          const float* inp, const float* weight, int N, int IC, int OC);

// The output gradient's operands for the native backward: g = bf16_bits(dout) (N x OC), gt =
// g transposed (OC x N) and, when dbias is not null, dbias[o] = the sum of
// dout[n][o] over n = 0, 1, ..., N-1 in that order, in double (rounded to fp32 once), from
// the unrounded values: bias_gradient's sums (linear.h).
void bf16_gradient_operands(uint16_t* g, uint16_t* gt, float* dbias, const float* dout, int N,
                            int OC);

}  // namespace scalar

namespace cpu {

// out[i] = bf16_round(in[i]); out may alias in. AVX2 when the CPU has it.
void round_bf16(float* out, const float* in, size_t n);
// out[i] = bf16_bits(in[i]): the packed form (half the bytes) for bf16 dot-product units.
void to_bf16(uint16_t* out, const float* in, size_t n);

// scalar::bf16_gradient_operands in one read of dout, 32 x 16 blocks: rounded, summed into
// dbias and transposed in registers where the CPU has avx512_bf16, through a 16 x 16 buffer
// elsewhere and at dout's edges. Same bits either way.
void bf16_gradient_operands(uint16_t* g, uint16_t* gt, float* dbias, const float* dout, int N,
                            int OC);

// scalar::bf16_gradient_operands without gt: g and, when dbias is not null, dbias, in one read
// of dout (for oneDNN on AMX, which reads dout transposed through strides faster than from a
// transposed copy). Same bits as g and dbias there.
void bf16_gradient_rows(uint16_t* g, float* dbias, const float* dout, int N, int OC);
// The same g in the AMX tiles' order (cpu/amx_gemm.h's amx_tiles_index, K = OC), for forge's
// AMX backward. Requires N and OC multiples of 32.
void bf16_gradient_tiles(uint16_t* tiles, float* dbias, const float* dout, int N, int OC);

// True when this CPU has bf16 dot-product instructions (avx512_bf16, AMX) and oneDNN can use
// them: the linear kernels then multiply packed bf16 operands natively (about twice the fp32
// rate) instead of running the fp32 GEMM over rounded values. FORGE_BF16_NATIVE=0 turns it
// off (for comparing the two paths).
bool native_bf16_available();

// C[M,N] = op(A) op(B) + bias + beta C on packed bf16 operands, fp32 accumulation, bias and
// output; the conventions of kernels/gemm.h; bias (N values, one per column) may be null.
// b_blocked (may be null): gemm_bf16_blocked_b_floats(K, N) floats where B is reordered first
// into oneDNN's preferred layout (cpu/onednn_matmul.h): faster for many rows, same bits.
// Requires native_bf16_available().
void gemm_bf16(bool transA, bool transB, int M, int N, int K, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc,
               const float* bias = nullptr, void* b_blocked = nullptr);
size_t gemm_bf16_blocked_b_floats(int K, int N);
// True when oneDNN runs gemm_bf16 on AMX tiles (its effective ISA has them).
bool bf16_gemm_on_amx();
// True when the bf16 linear layer's products run on forge's AMX kernel (cpu/amx_gemm.h) where
// their shape is whole tiles: on a CPU with AMX, with the AVX-512 kernel set, on the native
// path, unless FORGE_BF16_AMX=0.
bool amx_linear_available();
// True when bf16_linear_forward's product out[M, N] = x[M, K] W[N, K]^T runs there: available
// and whole tiles; else on oneDNN.
bool amx_linear_forward_runs(int M, int N, int K);
// True when bf16_linear_backward's products dout W and dout^T inp (N rows, IC inputs, OC
// outputs) run there; else on oneDNN.
bool amx_linear_backward_runs(int N, int IC, int OC);

// Scratch the two linear kernels need, in floats, for shapes up to N x IC x OC; less when
// every call passes a weight_operand (below), which then needs no room here.
size_t bf16_linear_scratch_floats(int N, int IC, int OC, bool weight_operand_given = false);
// What forward keeps for backward, in floats: its converted inp (packed bf16 on the native
// path, half the floats), so that backward does not convert it again.
size_t bf16_linear_saved_floats(int N, int IC, int OC);

// What n operand values take, in floats: packed bf16 on the native path, bf16-rounded fp32
// elsewhere, rounded up to a whole cache line.
size_t bf16_operand_floats(size_t n);

// kernels/linear.h's forward and backward with bf16-rounded operands, fp32 accumulation.
// scratch: bf16_linear_scratch_floats(N, IC, OC, weight_operand != nullptr) floats, not
// aliasing any argument.
// saved: bf16_linear_saved_floats(N, IC, OC) floats, or null: forward then keeps nothing, and
// backward converts inp itself. Backward's inp must be forward's.
// inp_in_saved: saved already holds inp's conversion (a forward of the same inp filled it).
// weight_operand: bf16_operand_floats(OC * IC) floats, or null. Forward writes the weight's
// operand for backward's dout W there (bf16(W); on forge's AMX kernel already packed as that
// product's B, in the same read of W that packs the forward's); backward then takes it from
// there instead of converting the weight again, so it must hold what a forward of this weight
// and shape wrote, unchanged since.
void bf16_linear_forward(float* out, float* saved, const float* inp, const float* weight,
                         const float* bias, int N, int IC, int OC, float* scratch,
                         bool inp_in_saved = false, float* weight_operand = nullptr);
void bf16_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* saved, int N, int IC,
                          int OC, float* scratch, const float* weight_operand = nullptr);

// The same for sibling layers whose weights lie back to back (one stacked weight of sum widths
// rows): forward writes each layer's output [N, widths[i]] into outs[i], backward reads each
// one's output gradient from douts[i], with no stacked copy of either (no bias). Scratch,
// saved and weight_operand as above for OC = sum widths. Only where bf16_linear_parts_run:
// forge's AMX kernel runs the stacked layer's products (widths multiples of 32, at most 4).
bool bf16_linear_parts_run(int N, int IC, std::span<const int> widths);
void bf16_linear_forward_parts(std::span<float* const> outs, std::span<const int> widths,
                               float* saved, const float* inp, const float* weight, int N, int IC,
                               float* scratch, float* weight_operand = nullptr);
void bf16_linear_backward_parts(float* dinp, float* dweight, std::span<const float* const> douts,
                                std::span<const int> widths, const float* inp, const float* weight,
                                const float* saved, int N, int IC, float* scratch,
                                const float* weight_operand = nullptr);

// GPT-2's c_fc backward from the gradient of its GELU's output, dact [N, OC], with GELU's
// backward (kernels/gelu.h, at c_fc's output pre [N, OC]) done as the output gradient is
// rounded into the AMX tiles and summed into dbias, so that it never goes to memory in fp32:
// dinp, dweight and dbias as bf16_linear_backward gives them from cpu::gelu_backward's
// gradient, bit for bit. Scratch, saved and weight_operand as above. Requires
// amx_linear_backward_runs(N, IC, OC).
void bf16_gelu_linear_backward(float* dinp, float* dweight, float* dbias, const float* dact,
                               const float* pre, const float* inp, const float* weight,
                               const float* saved, int N, int IC, int OC, float* scratch,
                               const float* weight_operand = nullptr);

// A block's last linear layer and the residual stream's update after it: out = residual +
// (inp W^T + bias), [N, OC], as bf16_linear_forward into out and then kernels/elementwise.h's
// add(out, residual, out) give it, bit for bit. On forge's AMX kernel the add is done on each
// block of rows as soon as the product has written it, while it is still in the core's caches:
// the layer's own output is never written out on its own, nor read back. Elsewhere the two one
// after the other. out must not alias residual; the rest as bf16_linear_forward.
void bf16_linear_residual_forward(float* out, float* saved, const float* inp, const float* residual,
                                  const float* weight, const float* bias, int N, int IC, int OC,
                                  float* scratch, float* weight_operand = nullptr);

// Llama's down projection after SwiGLU: out [N, OC] = swiglu(gate, up) W^T (no bias), gate and
// up [N, F], with SwiGLU's output (kernels/swiglu.h) rounded into the product's input operand
// in saved as it is made, never written out in fp32: out and saved as swiglu_forward and then
// bf16_linear_forward give them, bit for bit, so that backward (with saved) needs no fp32
// input. With a residual (not null), out = residual + that product, as
// bf16_linear_residual_forward adds it. Scratch and weight_operand as above for IC = F. Only
// with native bf16 dot products (native_bf16_available()) and saved.
void bf16_swiglu_linear_forward(float* out, float* saved, const float* gate, const float* up,
                                const float* weight, int N, int F, int OC, float* scratch,
                                float* weight_operand = nullptr, const float* residual = nullptr);

// Llama's MLP forward with SwiGLU in gate | up's product: gate and up [N, F] = inp W^T (the
// stacked weight gate then up, [2 F, IC]), and as soon as the product has written a block of
// rows and columns of both, SwiGLU of it (kernels/swiglu.h) rounded straight into the down
// projection's input operand in down_saved (gate and up still in the core's caches, not read
// back from memory); then out = residual + act W_down^T (no bias) as
// bf16_swiglu_linear_forward gives it. gate, up, out and both saved states carry the bits of
// bf16_linear_forward_parts and then bf16_swiglu_linear_forward. gate_up_saved,
// gate_up_operand: as bf16_linear_forward_parts's saved and weight_operand (OC = 2 F);
// down_saved, down_operand: as bf16_swiglu_linear_forward's (IC = F, OC = C). scratch: enough
// for both layers. Only where bf16_swiglu_mlp_forward_runs.
bool bf16_swiglu_mlp_forward_runs(int N, int C, int F);
void bf16_swiglu_mlp_forward(float* out, float* gate, float* up, float* gate_up_saved,
                             float* down_saved, const float* inp, const float* gate_up_w,
                             const float* down_w, const float* residual, int N, int C, int F,
                             float* scratch, float* gate_up_operand = nullptr,
                             float* down_operand = nullptr);

// Llama's gate | up (sibling layers of width F each, stacked weight gate then up) backward
// from the gradient of SwiGLU's output, dact [N, F], with SwiGLU's backward (kernels/swiglu.h,
// over gate and up [N, F]) done as the output gradients are rounded into the AMX tiles, so that
// dgate and dup never go to memory in fp32: dinp and dweight as bf16_linear_backward_parts
// gives them from cpu::swiglu_backward's dgate and dup, bit for bit. Scratch, saved and
// weight_operand as above for OC = 2 F. Only where bf16_linear_parts_run(N, IC, {F, F}).
void bf16_swiglu_linear_backward(float* dinp, float* dweight, const float* dact, const float* gate,
                                 const float* up, int F, const float* inp, const float* weight,
                                 const float* saved, int N, int IC, float* scratch,
                                 const float* weight_operand = nullptr);

// c_fc of GPT-2's MLP with its GELU done in the product where forge's AMX kernel runs it: out
// as bf16_linear_forward writes it and act = gelu(out) as kernels/gelu.h's gelu_forward
// computes it, each block of rows as soon as the product has written it (still in the core's
// caches), not in a pass of its own over the whole activation. Scratch, saved and
// weight_operand as above; same bits as the two kernels one after the other. Requires
// amx_linear_forward_runs(N, OC, IC).
void bf16_linear_gelu_forward(float* out, float* act, float* saved, const float* inp,
                              const float* weight, const float* bias, int N, int IC, int OC,
                              float* scratch, float* weight_operand = nullptr);

}  // namespace cpu

}  // namespace forge::kernels
