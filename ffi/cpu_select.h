// The row-select core on the CPU: the k first elements of each row in the order of order.h
// (largest radix key first, the lowest column among equal keys), sorted, values bit for bit;
// the same answer as the CUDA kernels (row_select.cuh). Header-only, no XLA types.
//
// One pass per row: elements are (radix key, column) pairs compared as one order (so no two
// tie); a buffer keeps every pair not below the k-th best seen so far; when it holds 2k, a
// selection (std::nth_element) keeps the best k and raises the bar to the k-th. Each element
// costs its key and one compare against the bar; the buffer is selected at most cols / k times,
// O(k) each: O(cols) per row whatever the order of the data.
#ifndef JAX_ARGREDUCE_FFI_CPU_SELECT_H_
#define JAX_ARGREDUCE_FFI_CPU_SELECT_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "order.h"

namespace jax_argreduce {

// An element of a row: its radix key (zero-extended) and column; larger pairs come first.
struct SelectItem {
  uint64_t key;
  int64_t col;
  bool operator>(const SelectItem& o) const {
    return key > o.key || (key == o.key && col < o.col);
  }
};

// The k first (key, column) pairs of columns [0, cols) in that order, sorted, in
// buffer[0..k) (1 <= k <= cols; `key_of(c)` gives column c's radix key). `buffer` is scratch,
// reused across rows.
template <class KeyOf>
void SelectTopK(int64_t cols, int64_t k, const KeyOf& key_of, std::vector<SelectItem>& buffer) {
  const auto greater = [](const SelectItem& a, const SelectItem& b) { return a > b; };
  const size_t capacity = static_cast<size_t>(std::min<int64_t>(2 * k, cols));
  buffer.clear();
  buffer.reserve(capacity);
  // The bar: once the buffer was first cut to k, an element must beat the k-th best so far.
  bool has_bar = false;
  SelectItem bar{0, 0};
  for (int64_t c = 0; c < cols; ++c) {
    const SelectItem item{static_cast<uint64_t>(key_of(c)), c};
    // Columns grow, so an item whose key equals the bar's comes after it: only a larger key
    // enters once there is a bar.
    if (has_bar && item.key <= bar.key) continue;
    buffer.push_back(item);
    if (buffer.size() == capacity && static_cast<int64_t>(capacity) > k) {
      std::nth_element(buffer.begin(), buffer.begin() + (k - 1), buffer.end(), greater);
      buffer.resize(static_cast<size_t>(k));
      bar = *std::min_element(buffer.begin(), buffer.end(),
                              [](const SelectItem& a, const SelectItem& b) { return b > a; });
      has_bar = true;
    }
  }
  std::partial_sort(buffer.begin(), buffer.begin() + k, buffer.end(), greater);
  buffer.resize(static_cast<size_t>(k));
}

// values[0..k) (bit for bit) and indices[0..k) of the k first elements of one row of `cols`
// elements (1 <= k <= cols) ranked by `key_of(c)`, column c's radix key. `buffer` is scratch,
// reused across rows.
template <class Bits, class Index, class KeyOf>
void SelectRowCpu(const Bits* row, int64_t cols, int64_t k, const KeyOf& key_of, Bits* values,
                  Index* indices, std::vector<SelectItem>& buffer) {
  SelectTopK(cols, k, key_of, buffer);
  for (int64_t i = 0; i < k; ++i) {
    values[i] = row[buffer[i].col];
    indices[i] = static_cast<Index>(buffer[i].col);
  }
}

// top_k's row: ranked by the elements' own radix keys.
template <Format F, class Index>
void TopKRowCpu(const typename FormatTraits<F>::Bits* row, int64_t cols, int64_t k,
                typename FormatTraits<F>::Bits* values, Index* indices,
                std::vector<SelectItem>& buffer) {
  SelectRowCpu(row, cols, k, [row](int64_t c) { return RadixKey<F>(row[c]); }, values, indices,
               buffer);
}

}  // namespace jax_argreduce

#endif  // JAX_ARGREDUCE_FFI_CPU_SELECT_H_
