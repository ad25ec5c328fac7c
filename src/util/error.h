// The one exception type moestream throws for bad input and failed resources.
// Messages are meant for users: say what is wrong, where, and what to do.
#pragma once
#include <stdexcept>
#include <string>

namespace ms {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  // Out of line (error.cpp) so the type's vtable and typeinfo live in ms_util
  // and every library that throws or catches it links the same way.
  ~Error() override;
};

}  // namespace ms
