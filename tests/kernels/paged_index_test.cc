// The page-table and window arithmetic the CUDA attention kernels use
// (kernels/cuda/paged_index.h), checked on the host: the kernels themselves only run where
// a GPU is.
#include "kernels/cuda/paged_index.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessera::kernels::paged {
namespace {

bool Visible(int key, int position, int window) {
  return key <= position && (window == 0 || key > position - window);
}

TEST(PagedIndexTest, FirstVisibleKeyFollowsTheWindowRule) {
  EXPECT_EQ(FirstVisibleKey(10, 0), 0);
  EXPECT_EQ(FirstVisibleKey(10, 4), 7);   // Keys 7..10.
  EXPECT_EQ(FirstVisibleKey(10, 11), 0);  // The window covers everything.
  EXPECT_EQ(FirstVisibleKey(3, 1), 3);    // Only the query's own key.
}

// Split-K partitions cover exactly the visible keys, each once, for every partition size,
// window and position, including partitions wholly before the window.
TEST(PagedIndexTest, PartitionsCoverTheVisibleKeysOnce) {
  for (int size : {1, 7, 16, 64}) {
    for (int window : {0, 1, 5, 37, 64, 200}) {
      for (int position = 0; position < 150; ++position) {
        std::vector<int> seen(position + 1, 0);
        const int parts = (position + 1 + size - 1) / size + 1;  // One spare, as the grid has.
        for (int part = 0; part < parts; ++part) {
          int begin = 0, end = 0;
          PartitionKeys(part, size, position, window, &begin, &end);
          for (int k = begin; k < end; ++k) {
            ASSERT_GE(k, part * size);
            ASSERT_LT(k, (part + 1) * size);
            ++seen[k];
          }
        }
        for (int k = 0; k <= position; ++k) {
          ASSERT_EQ(seen[k], Visible(k, position, window) ? 1 : 0)
              << "size " << size << " window " << window << " position " << position
              << " key " << k;
        }
      }
    }
  }
}

// No query of a prefill tile sees a key before the tile the kernel starts from.
TEST(PagedIndexTest, PrefillStartsAtTheEarliestVisibleKeyTile) {
  for (int window : {0, 1, 5, 31, 32, 33, 100}) {
    for (int first = 0; first < 200; ++first) {
      const int start = FirstKeyTile(first, window, 32);
      EXPECT_EQ(start % 32, 0);
      for (int row = 0; row < 16; ++row) {
        for (int k = 0; k < start; ++k) {
          ASSERT_FALSE(Visible(k, first + row, window))
              << "window " << window << " first " << first << " row " << row << " key " << k;
        }
      }
      ASSERT_GT(start + 32, FirstVisibleKey(first, window));
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::paged
