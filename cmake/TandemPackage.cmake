# libtandem.so and the installed package.
#
# Scripts link one shared library, Tandem::tandem (libtandem.so), and include
# <tandem/tandem.h>. It holds the controller, the IR (with the model layers)
# and the schedules whole, so a script needs nothing else of ours; only
# Abseil (whose types are in the API) comes with it. The Cap'n Proto control
# plane is inside, hidden from scripts.
#
# The example models, their data and the example jobs are a library of their
# own on top: Tandem::examples (libtandem_examples.so, <tandem/examples.h>),
# which links Tandem::tandem. A script that trains its own model does not
# need it; the Python stub (ExampleJob) and scripts that borrow the example
# data do.
#
# `cmake --install build --prefix P` installs:
#   P/bin/tandem, P/bin/tandem-actor
#   P/lib/libtandem.so*, P/lib/libtandem_examples.so*,
#   P/lib/cmake/Tandem/ (the package: Tandem::tandem, Tandem::examples)
#   P/include/tandem/tandem.h, P/include/tandem/examples.h and the headers
#     they include, under P/include/tandem/
#   P/lib/python3/dist-packages/tandem/ (the Python stub, when built)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# tandem_shared_library(TARGET SOURCE src OUTPUT_NAME out EXPORT_NAME name
#                       ARCHIVES a...): lib<out>.so, versioned, under
# <build>/lib, aliased and exported as Tandem::<name>, holding every object
# of ARCHIVES, not only those its own SOURCE references: scripts call into
# all of them.
function(tandem_shared_library target)
  cmake_parse_arguments(ARG "" "SOURCE;OUTPUT_NAME;EXPORT_NAME" "ARCHIVES" ${ARGN})
  add_library(${target} SHARED ${ARG_SOURCE})
  add_library(Tandem::${ARG_EXPORT_NAME} ALIAS ${target})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${ARG_OUTPUT_NAME}
    EXPORT_NAME ${ARG_EXPORT_NAME}
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
  set(whole)
  foreach(archive IN LISTS ARG_ARCHIVES)
    list(APPEND whole "$<TARGET_FILE:${archive}>")
  endforeach()
  target_link_options(${target} PRIVATE "LINKER:--whole-archive" ${whole} "LINKER:--no-whole-archive")
  add_dependencies(${target} ${ARG_ARCHIVES})
  tandem_target_defaults(${target})
endfunction()

set(_tandem_archives tandem_controller tandem_schedules tandem_ir tandem_rpc)
tandem_shared_library(tandem_api SOURCE controller/include/tandem/tandem.cc
  OUTPUT_NAME tandem EXPORT_NAME tandem ARCHIVES ${_tandem_archives})
# The archives' own dependencies (BLAS, Cap'n Proto, ...).
target_link_libraries(tandem_api PRIVATE ${_tandem_archives})
target_link_libraries(tandem_api PUBLIC
  absl::status absl::statusor absl::strings absl::str_format absl::span absl::time absl::flat_hash_map)
target_include_directories(tandem_api PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/controller/include>
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/tandem>)
target_compile_features(tandem_api PUBLIC cxx_std_20)

# libtandem_examples.so: the tandem_examples archive, its references into the
# IR resolved by libtandem.so. The archive is not a link library here, so its
# own static dependencies stay out and the IR is not linked twice.
tandem_shared_library(tandem_examples_api SOURCE examples/include/tandem/examples.cc
  OUTPUT_NAME tandem_examples EXPORT_NAME examples ARCHIVES tandem_examples)
# Finds libtandem.so beside it, whoever loads it.
set_target_properties(tandem_examples_api PROPERTIES INSTALL_RPATH "$ORIGIN")
target_link_libraries(tandem_examples_api PUBLIC tandem_api)
target_link_libraries(tandem_examples_api PRIVATE PkgConfig::SENTENCEPIECE)  # the tokenizer's
target_include_directories(tandem_examples_api PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/examples/include>)

install(TARGETS tandem tandem-actor RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS tandem_api tandem_examples_api EXPORT TandemTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES controller/include/tandem/tandem.h examples/include/tandem/examples.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem)
# The headers <tandem/tandem.h> and <tandem/examples.h> reach, under
# include/tandem/ (they include each other as "ir/...", "schedules/...": the
# package adds include/tandem to the include path). Not the control plane's:
# those need Cap'n Proto.
foreach(_dir ir schedules examples)
  install(DIRECTORY ${_dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem/${_dir}
    FILES_MATCHING PATTERN "*.h" PATTERN "scripts" EXCLUDE PATTERN "include" EXCLUDE)
endforeach()
install(DIRECTORY controller/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem/controller
  FILES_MATCHING PATTERN "*.h"
  PATTERN "include" EXCLUDE
  PATTERN "local_launcher.h" EXCLUDE
  PATTERN "launcher_loop.h" EXCLUDE)
# The one control-plane header the API names (it needs no Cap'n Proto).
install(FILES rpc/control_plane_kind.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem/rpc)

set(_tandem_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
install(EXPORT TandemTargets NAMESPACE Tandem:: DESTINATION ${_tandem_cmake_dir})
configure_package_config_file(cmake/TandemConfig.cmake.in ${CMAKE_BINARY_DIR}/TandemConfig.cmake
  INSTALL_DESTINATION ${_tandem_cmake_dir} PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/TandemConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/TandemConfig.cmake ${CMAKE_BINARY_DIR}/TandemConfigVersion.cmake
  DESTINATION ${_tandem_cmake_dir})
