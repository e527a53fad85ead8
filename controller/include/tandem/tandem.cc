// libtandem.so's own translation unit: the library is the archives linked
// whole (cmake/TandemPackage.cmake); this checks that the public header
// compiles on its own.
#include "tandem/tandem.h"
