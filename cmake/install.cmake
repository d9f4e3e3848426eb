# `cmake --install build [--prefix DIR]`: headers, libshoal.a and libshoal.so, the CLIs, a
# CMake package (find_package(shoal): shoal::shoal is the shared C ABI library,
# shoal::shoal_static the static library with the C++ API) and shoal.pc for pkg-config.
include(CMakePackageConfigHelpers)

install(TARGETS shoal shoal_shared EXPORT shoalTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY sdk/include/shoal DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_BINARY_DIR}/generated/shoal/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/shoal)
install(TARGETS shoal-aggregator shoal-client shoal-peer shoal-keygen shoal-sim shoal-generate RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS tools/shoal-report DESTINATION ${CMAKE_INSTALL_BINDIR})
# The CUDA backend module, beside libshoal, where backend/registry.cc looks for it.
if(SHOAL_HAVE_CUDA)
  install(TARGETS shoal-cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

set(SHOAL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/shoal)
install(EXPORT shoalTargets NAMESPACE shoal:: DESTINATION ${SHOAL_CMAKE_DIR})
configure_package_config_file(cmake/shoalConfig.cmake.in ${CMAKE_BINARY_DIR}/shoalConfig.cmake
  INSTALL_DESTINATION ${SHOAL_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/shoalConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/shoalConfig.cmake ${CMAKE_BINARY_DIR}/shoalConfigVersion.cmake
  DESTINATION ${SHOAL_CMAKE_DIR})

# pkg-config: `pkg-config --cflags --libs shoal` links libshoal.so (the C ABI);
# `--static` adds what libshoal.a needs.
set(SHOAL_PC_LIBS_PRIVATE "-lzmq -lsodium -lcrypto -lopenblas -lzstd -lspdlog -lfmt -lz -lpthread -ldl")
# Relocatable: the prefix is found from the .pc file's own place (whatever --prefix says).
string(REGEX REPLACE "[^/]+" ".." SHOAL_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
configure_file(cmake/shoal.pc.in ${CMAKE_BINARY_DIR}/shoal.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/shoal.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
