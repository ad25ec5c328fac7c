// Where a sequence's recurrent state can go back to (DESIGN.md: sequence
// state that can be rolled back and forked).
//
// Attention keeps K/V by position, so any earlier position is a rollback away.
// A recurrent (Gated DeltaNet) layer keeps one state that every token
// overwrites: returning to position p exactly needs a copy of the state taken
// when the sequence stood at p, a checkpoint. (The other exact way, replaying
// the accepted tokens from an earlier checkpoint, costs a forward pass; the
// tests keep it as the oracle.)
//
// This is the bookkeeping of one cache's checkpoints, pure C++: which
// positions are held, in which of `capacity` storage entries, and which one to
// give up when a new one needs room. The bytes live where the state lives: in
// the KvCache's host memory for the CPU backend, in a device backend's store.
//
// "The state at position p" is the state after p tokens (what the next
// token at position p starts from); position 0 is the zero state and is never
// stored.
#pragma once
#include <cstdint>
#include <vector>

namespace ms {

struct CheckpointOptions {
  // States kept besides the live one. 0: none (a recurrent cache then keeps
  // all of its positions or starts over).
  int capacity = 0;
  // A decode step (one token) leaves a checkpoint when the sequence is at
  // least this many positions past its newest one; a forward of several
  // tokens (a prompt or a prompt chunk) always leaves one at its end.
  int64_t spacing = 256;
};

class StateCheckpoints {
 public:
  explicit StateCheckpoints(CheckpointOptions o = {});

  const CheckpointOptions& options() const { return opt_; }
  int capacity() const { return static_cast<int>(pos_.size()); }

  // The entry holding the state at `pos`, or -1.
  int find(int64_t pos) const;
  // The largest position <= pos that is held, or -1 when none is.
  int64_t at_or_below(int64_t pos) const;
  // The newest (largest) position held, or -1.
  int64_t newest() const { return at_or_below(INT64_MAX); }
  // Whether a forward of n_tokens that leaves the sequence at `pos` should
  // leave a checkpoint there (the spacing rule above).
  bool due(int64_t pos, int64_t n_tokens) const;

  // Starts a forward pass: entries taken from now on are protected from
  // eviction until the next begin_forward() (a verify batch keeps every one
  // of its token states until the caller has rolled back).
  void begin_forward() { ++forward_; }
  // An entry to write the state at `pos` into: the one already holding pos;
  // else a free one; else, among the entries neither taken in this forward
  // nor the newest, the one whose loss leaves the smallest gap between its
  // neighbours (so the kept positions stay spread over the sequence, the
  // prompt's end among them). -1 when there is no room (capacity 0, or no
  // entry may go). The entry is marked as holding pos.
  int reserve(int64_t pos);
  // Forgets the checkpoints past pos (stale after a rollback to pos).
  void drop_after(int64_t pos);
  void clear();
  // The positions held, ascending (tests, logs).
  std::vector<int64_t> positions() const;

 private:
  CheckpointOptions opt_;
  std::vector<int64_t> pos_;      // per entry: the position held, -1 free
  std::vector<uint64_t> taken_;   // per entry: the forward that took it
  uint64_t forward_ = 1;
};

}  // namespace ms
