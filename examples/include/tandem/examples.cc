// libtandem_examples.so's own translation unit: the library is the
// tandem_examples archive linked whole (cmake/TandemPackage.cmake); this
// checks that the public header compiles on its own.
#include "tandem/examples.h"
