# `cpack -G DEB` in a build folder: one .deb per Slurm version, named mlprio-slurm-X.Y.Z
# (the Slurm the plugins were compiled for, MLPRIO_SLURM_SRC), holding
#   the tools (mlprio-model, mlprio-replay, mlprio-fsdp, mlprio-why)  -> /usr/bin
#   the two plugins                                                -> MLPRIO_DEB_PLUGIN_DIR
#   README files, the slurm.conf fragments and job scripts         -> /usr/share/doc/mlprio
# Plugin folder: for the Slurm that Debian's own slurmctld package provides (same X.Y.Z), Debian's
# PluginDir, /usr/lib/x86_64-linux-gnu/slurm-wlm, and Depends: slurmctld (= exact Debian version)
# (slurmctld refuses plugins of any other version). For any other version (a Slurm built from
# source) /usr/lib/mlprio/slurm-X.Y.Z, to be added to that Slurm's PluginDir
# (/usr/share/doc/mlprio/plugindir-X.Y.Z.conf says how); no Slurm dependency, as no Debian
# package provides it. `scripts/package` runs this and checks the result.
if(NOT MLPRIO_HAVE_SLURM)
  return()   # a package is for one Slurm version: without plugins, nothing to package
endif()

set(MLPRIO_DEB_DEBIAN_SLURM "" CACHE STRING
    "Debian version of slurmctld the package depends on (auto: dpkg-query, when its upstream version matches)")
if(NOT MLPRIO_DEB_DEBIAN_SLURM)
  find_program(MLPRIO_DPKG_QUERY dpkg-query)
  if(MLPRIO_DPKG_QUERY)
    execute_process(COMMAND ${MLPRIO_DPKG_QUERY} -W -f=\${Version} slurmctld
                    OUTPUT_VARIABLE _deb_ver ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    string(REGEX REPLACE "^[0-9]+:" "" _up "${_deb_ver}")
    string(REGEX REPLACE "-[^-]*$" "" _up "${_up}")
    if(_deb_ver AND _up STREQUAL MLPRIO_SLURM_VERSION)
      set(_debian_slurm "${_deb_ver}")
    endif()
  endif()
else()
  set(_debian_slurm "${MLPRIO_DEB_DEBIAN_SLURM}")
endif()

if(_debian_slurm)
  set(MLPRIO_DEB_PLUGIN_DIR "/usr/lib/x86_64-linux-gnu/slurm-wlm")
else()
  set(MLPRIO_DEB_PLUGIN_DIR "/usr/lib/mlprio/slurm-${MLPRIO_SLURM_VERSION}")
endif()

# The package's own copies of the plugins (component deb_plugins, never part of a plain
# `cmake --install`, which keeps MLPRIO_PLUGIN_INSTALL_DIR).
foreach(_p site_factor_mlprio job_submit_mlprio)
  install(TARGETS ${_p} LIBRARY DESTINATION ${MLPRIO_DEB_PLUGIN_DIR}
          COMPONENT deb_plugins EXCLUDE_FROM_ALL)
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/plugindir-${MLPRIO_SLURM_VERSION}.conf
"# mlprio plugins built for Slurm ${MLPRIO_SLURM_VERSION}: installed in ${MLPRIO_DEB_PLUGIN_DIR}.
# slurmctld loads them only if its own version is exactly ${MLPRIO_SLURM_VERSION}.
# Add the folder to slurm.conf's PluginDir (keep Slurm's own folder first), e.g.
#   PluginDir=<Slurm's plugin folder>:${MLPRIO_DEB_PLUGIN_DIR}
# (Debian's slurmctld looks in /usr/lib/x86_64-linux-gnu/slurm-wlm by default.)
# Then the lines of mlprio.conf in this folder (PrioritySiteFactorPlugin, JobSubmitPlugins).
")
install(FILES ${CMAKE_BINARY_DIR}/plugindir-${MLPRIO_SLURM_VERSION}.conf
        DESTINATION share/doc/mlprio COMPONENT deb_docs EXCLUDE_FROM_ALL)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION share/doc/mlprio/examples/configs
        COMPONENT deb_docs EXCLUDE_FROM_ALL)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/jobs/ DESTINATION share/doc/mlprio/examples/jobs
        COMPONENT deb_docs EXCLUDE_FROM_ALL)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME "mlprio-slurm-${MLPRIO_SLURM_VERSION}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "mlprio maintainers <root@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "ML-informed job priorities for Slurm ${MLPRIO_SLURM_VERSION}: site_factor and job_submit plugins, tools")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(_debian_slurm)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "slurmctld (= ${_debian_slurm})")
endif()
# Several builds (one per Slurm version) may not be installed together: same tools in /usr/bin.
set(CPACK_DEBIAN_PACKAGE_PROVIDES "mlprio")
set(CPACK_DEBIAN_PACKAGE_CONFLICTS "mlprio")
set(CPACK_DEBIAN_PACKAGE_REPLACES "mlprio")
# One package from the tools (install rules without a component: "Unspecified"), the package's
# plugin copies and docs; not the plain-install plugin copies (component slurm_plugins) nor
# the share/mlprio copies of configs and jobs (component examples; in the package they are
# under /usr/share/doc/mlprio/examples).
set(CPACK_COMPONENTS_ALL Unspecified deb_plugins deb_docs)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
include(CPack)
message(STATUS "package: cpack -G DEB -> ${CPACK_PACKAGE_NAME}, plugins in ${MLPRIO_DEB_PLUGIN_DIR}")
