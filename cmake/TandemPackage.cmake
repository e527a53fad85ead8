# libtandem.so and the installed package.
#
# Scripts link one shared library, Tandem::tandem (libtandem.so), and include
# <tandem/tandem.h>. It holds the controller, the IR, the schedules and the
# example models whole, so a script needs nothing else of ours; only Abseil
# (whose types are in the API) comes with it. The Cap'n Proto control plane
# is inside, hidden from scripts.
#
# `cmake --install build --prefix P` installs:
#   P/bin/tandem, P/bin/tandem-actor
#   P/lib/libtandem.so*, P/lib/cmake/Tandem/ (the package: Tandem::tandem)
#   P/include/tandem/tandem.h and the headers it includes, under P/include/tandem/
#   P/lib/python3/dist-packages/tandem/ (the Python stub, when built)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_tandem_archives tandem_controller tandem_examples tandem_schedules tandem_ir tandem_rpc)
add_library(tandem_api SHARED controller/include/tandem/tandem.cc)
add_library(Tandem::tandem ALIAS tandem_api)
set_target_properties(tandem_api PROPERTIES
  OUTPUT_NAME tandem
  EXPORT_NAME tandem
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
# Every object of the archives goes in, not only those this library's own
# code references: scripts call into all of them.
set(_tandem_whole)
foreach(_archive IN LISTS _tandem_archives)
  list(APPEND _tandem_whole "$<TARGET_FILE:${_archive}>")
endforeach()
target_link_options(tandem_api PRIVATE "LINKER:--whole-archive" ${_tandem_whole} "LINKER:--no-whole-archive")
target_link_libraries(tandem_api PRIVATE ${_tandem_archives})
target_link_libraries(tandem_api PUBLIC
  absl::status absl::statusor absl::strings absl::str_format absl::span absl::time absl::flat_hash_map)
target_include_directories(tandem_api PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/controller/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/tandem>)
target_compile_features(tandem_api PUBLIC cxx_std_20)
tandem_target_defaults(tandem_api)

install(TARGETS tandem tandem-actor RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS tandem_api EXPORT TandemTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES controller/include/tandem/tandem.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem)
# The headers <tandem/tandem.h> reaches, under include/tandem/ (they include
# each other as "ir/...", "schedules/...": the package adds include/tandem
# to the include path). Not the control plane's: those need Cap'n Proto.
foreach(_dir ir schedules examples)
  install(DIRECTORY ${_dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem/${_dir}
    FILES_MATCHING PATTERN "*.h" PATTERN "scripts" EXCLUDE)
endforeach()
install(DIRECTORY controller/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem/controller
  FILES_MATCHING PATTERN "*.h"
  PATTERN "include" EXCLUDE
  PATTERN "local_launcher.h" EXCLUDE
  PATTERN "launcher_loop.h" EXCLUDE)

set(_tandem_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
install(EXPORT TandemTargets NAMESPACE Tandem:: DESTINATION ${_tandem_cmake_dir})
configure_package_config_file(cmake/TandemConfig.cmake.in ${CMAKE_BINARY_DIR}/TandemConfig.cmake
  INSTALL_DESTINATION ${_tandem_cmake_dir} PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/TandemConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/TandemConfig.cmake ${CMAKE_BINARY_DIR}/TandemConfigVersion.cmake
  DESTINATION ${_tandem_cmake_dir})
