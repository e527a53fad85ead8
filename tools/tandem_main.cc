// `tandem`: the command-line front end. main() only hands its arguments to
// the command line of tools/cli/.
#include <iostream>
#include <string>
#include <vector>

#include "tools/cli/commands.h"

int main(int argc, char** argv) {
  return tandem::cli::RunTandem(std::vector<std::string>(argv + 1, argv + argc), {std::cout, std::cerr, std::cin});
}
