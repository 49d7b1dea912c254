# `cmake --install`: bin/sluice and bin/sluice-prep (its Python package under share/sluice/),
# the public headers (include/sluice/ only), the static libraries and the CMake package
# (sluiceConfig.cmake, sluiceConfigVersion.cmake, sluiceTargets.cmake) that find_package(sluice)
# reads. The library's users link sluice::sluice.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SLUICE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)

add_library(sluice_api INTERFACE)
target_link_libraries(sluice_api INTERFACE sluice_train)
set_target_properties(sluice_api PROPERTIES EXPORT_NAME sluice)
add_library(sluice::sluice ALIAS sluice_api)

set(_sluice_libs sluice_common sluice_storage sluice_cache sluice_sampler sluice_prefetch
    sluice_train sluice_torch sluice_api)
if(TARGET sluice_sampler_cuda)
  list(APPEND _sluice_libs sluice_sampler_cuda)
endif()
install(TARGETS ${_sluice_libs} EXPORT sluiceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS sluice RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/sluice DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_BINARY_DIR}/generated/sluice/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice)
install(EXPORT sluiceTargets NAMESPACE sluice:: DESTINATION ${SLUICE_CMAKE_DIR})

configure_package_config_file(cmake/sluiceConfig.cmake.in ${CMAKE_BINARY_DIR}/sluiceConfig.cmake
                              INSTALL_DESTINATION ${SLUICE_CMAKE_DIR})
# While 0.x, a minor version may break the API: only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/sluiceConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/sluiceConfig.cmake ${CMAKE_BINARY_DIR}/sluiceConfigVersion.cmake
        DESTINATION ${SLUICE_CMAKE_DIR})

configure_file(cmake/sluice-prep.in ${CMAKE_BINARY_DIR}/sluice-prep @ONLY)
install(PROGRAMS ${CMAKE_BINARY_DIR}/sluice-prep DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS scripts/sluice_prep.py DESTINATION ${CMAKE_INSTALL_DATADIR}/sluice)
install(DIRECTORY scripts/sluice_prep DESTINATION ${CMAKE_INSTALL_DATADIR}/sluice
        FILES_MATCHING PATTERN "*.py")
