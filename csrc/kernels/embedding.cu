// Masked embedding: a vocab-parallel rank's share of the token embedding in one kernel. Row t of out is
// row ids[t] - start of weight where that row is this rank's, else zeros (the all-reduce after it sums
// the ranks' shares). One block per token. A row is copied bit for bit in words of Word: 16 bytes when
// every row allows, else one element; the dtype matters only through its size, and zero bits are +0.0.
#include "../vec.cuh"
#include "dependent_launch.h"
#include "launch.h"

namespace pagoda {

template <typename Word>
__global__ void masked_embedding_kernel(Word* __restrict__ out,              // [num_tokens, row_words]
                                        const int64_t* __restrict__ ids,     // [num_tokens]
                                        const Word* __restrict__ weight,     // [rows, row_words]
                                        int64_t start, int64_t rows, int row_words) {
  start_as_dependent();  // ids come from a host copy or the kernel before (launched as a programmatic dependent)
  const int64_t row = ids[blockIdx.x] - start;
  Word* dst = out + blockIdx.x * static_cast<int64_t>(row_words);
  if (row < 0 || row >= rows) {  // another rank's token: zeros
    for (int i = threadIdx.x; i < row_words; i += blockDim.x) dst[i] = Word{};
    return;
  }
  const Word* src = weight + row * row_words;
  for (int i = threadIdx.x; i < row_words; i += blockDim.x) dst[i] = src[i];
}

template <typename Word>
void launch_words(void* out, const int64_t* ids, const void* weight, int64_t start, int64_t rows, int64_t num_tokens,
                  int row_bytes, cudaStream_t stream) {
  const int row_words = row_bytes / static_cast<int>(sizeof(Word));
  const dim3 grid(static_cast<unsigned>(num_tokens));
  launch_dependent(masked_embedding_kernel<Word>, grid, dim3(warp_threads(row_words, 256)), 0, stream,
                   static_cast<Word*>(out), ids, static_cast<const Word*>(weight), start, rows, row_words);
}

void launch_masked_embedding(DType dtype, void* out, const int64_t* ids, const void* weight, int64_t start,
                             int64_t rows, int64_t num_tokens, int hidden, cudaStream_t stream) {
  const int element_bytes = dtype == DType::kFloat32 ? 4 : 2;
  const int row_bytes = hidden * element_bytes;
  if (row_bytes % 16 == 0 && aligned16(weight) && aligned16(out)) {
    launch_words<Vec<uint32_t, 4>>(out, ids, weight, start, rows, num_tokens, row_bytes, stream);
  } else if (element_bytes == 4) {
    launch_words<Vec<uint32_t, 1>>(out, ids, weight, start, rows, num_tokens, row_bytes, stream);
  } else {
    launch_words<Vec<uint16_t, 1>>(out, ids, weight, start, rows, num_tokens, row_bytes, stream);
  }
}

}  // namespace pagoda
