#include "util/error.h"

namespace ms {

Error::~Error() = default;

}  // namespace ms
