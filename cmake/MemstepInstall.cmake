# `cmake --install BUILD [--prefix DIR]`: what goes where (GNUInstallDirs).
#
#   bin/memstep                          the CLI
#   <libdir>/libmemstep.so               the injected library (also the C API's definitions)
#   include/memstep/memstep.h            the public header (C API)
#   include/memstep/scoped.h             its C++ scope objects (ScopedStep, ScopedStage)
#   share/memstep/python/                the Python helper and the start-up hook (python/)
#   <libdir>/cmake/memstep/              find_package(memstep): memstep::memstep, memstep::library
#   <libdir>/pkgconfig/memstep.pc        pkg-config --cflags memstep
#
# The CLI finds libmemstep.so and the Python helper relative to its own
# executable (tools/CMakeLists.txt compiles in the relative paths), so an
# installed tree works from any prefix without environment variables, and
# the package files compute the prefix from their own location, so a tree
# moved or installed with --prefix stays usable.

include(CMakePackageConfigHelpers)

install(TARGETS memstep_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/memstep/memstep.h
              ${PROJECT_SOURCE_DIR}/include/memstep/scoped.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/memstep)

set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/memstep)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/memstepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/memstepConfig.cmake
  INSTALL_DESTINATION ${_cmake_dir}
  PATH_VARS CMAKE_INSTALL_BINDIR CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/package/memstepConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/memstepConfig.cmake
              ${PROJECT_BINARY_DIR}/package/memstepConfigVersion.cmake
        DESTINATION ${_cmake_dir})

# pkg-config: the prefix relative to the .pc file (${pcfiledir}).
file(RELATIVE_PATH MEMSTEP_PC_TO_PREFIX
     ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
if(MEMSTEP_PC_TO_PREFIX STREQUAL "")
  set(MEMSTEP_PC_TO_PREFIX ".")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/memstep.pc.in ${PROJECT_BINARY_DIR}/package/memstep.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/memstep.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
