# Where `cmake --install` puts things, and the packages CPack makes from the same rules
# (scripts/package.sh). Two components: `launcher` (dtlaunch, its man page and completion, the
# docs) and `trainer` (dtl-train, which needs libtorch): the .deb of the launcher does not pull in
# libtorch.
include(GNUInstallDirs)

if(SKBUILD)
  # The pip wheel: the binary goes to the environment's bin/ (on PATH, no Python in front of it),
  # the man page and completion under its share/.
  set(DTL_BIN_DIR "${SKBUILD_SCRIPTS_DIR}")
  set(DTL_SHARE_DIR "${SKBUILD_DATA_DIR}/share")
else()
  set(DTL_BIN_DIR "${CMAKE_INSTALL_BINDIR}")
  set(DTL_SHARE_DIR "${CMAKE_INSTALL_DATAROOTDIR}")
endif()

if(TARGET dtlaunch)
  install(TARGETS dtlaunch DESTINATION "${DTL_BIN_DIR}" COMPONENT launcher)
  # The man page and completion scripts come from the built binary itself, from the same flag
  # table as --help, so they cannot drift from it.
  set(_gen "${PROJECT_BINARY_DIR}/generated")
  add_custom_command(
    OUTPUT "${_gen}/dtlaunch.1" "${_gen}/dtlaunch.bash" "${_gen}/_dtlaunch"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${_gen}"
    COMMAND dtlaunch completion man > "${_gen}/dtlaunch.1"
    COMMAND dtlaunch completion bash > "${_gen}/dtlaunch.bash"
    COMMAND dtlaunch completion zsh > "${_gen}/_dtlaunch"
    DEPENDS dtlaunch
    COMMENT "Generating dtlaunch's man page and shell completion from the binary")
  add_custom_target(dtl_generated ALL DEPENDS "${_gen}/dtlaunch.1" "${_gen}/dtlaunch.bash" "${_gen}/_dtlaunch")
  install(FILES "${_gen}/dtlaunch.1" DESTINATION "${DTL_SHARE_DIR}/man/man1" COMPONENT launcher)
  install(FILES "${_gen}/dtlaunch.bash" RENAME dtlaunch
          DESTINATION "${DTL_SHARE_DIR}/bash-completion/completions" COMPONENT launcher)
  install(FILES "${_gen}/_dtlaunch" DESTINATION "${DTL_SHARE_DIR}/zsh/vendor-completions" COMPONENT launcher)
  if(NOT SKBUILD)
    install(FILES README.md BENCHMARKS.md CONTRIBUTING.md DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT launcher)
    install(DIRECTORY docs/ DESTINATION "${CMAKE_INSTALL_DOCDIR}/docs" COMPONENT launcher FILES_MATCHING PATTERN "*.md" PATTERN "*.yaml")
    install(FILES LICENSE DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT launcher)
    install(FILES LICENSE RENAME copyright DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT launcher)
  endif()
endif()
if(TARGET dtl-train)
  install(TARGETS dtl-train DESTINATION "${DTL_BIN_DIR}" COMPONENT trainer)
endif()

# `cpack -G DEB` (scripts/package.sh): one .deb per component, Depends computed by dpkg-shlibdeps
# from what the binaries really load.
set(CPACK_PACKAGE_NAME dtlaunch)
set(CPACK_PACKAGE_VENDOR "dtlaunch")
set(CPACK_PACKAGE_CONTACT "dtlaunch developers <dtlaunch@example.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed-training launcher: torchrun's command line, an event-driven supervisor")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_NAME dtlaunch)
set(CPACK_DEBIAN_TRAINER_PACKAGE_NAME dtl-train)
set(CPACK_DEBIAN_TRAINER_PACKAGE_DEPENDS "dtlaunch (= ${PROJECT_VERSION})")
set(CPACK_COMPONENT_LAUNCHER_DESCRIPTION
    "dtlaunch starts one worker per GPU with torchrun's environment and supervises them.\n It takes torchrun's flags and accelerate's config files, and starts in milliseconds.\n .\n A hung Python rank's stack is read by py-spy, which Debian does not package:\n install it with 'pip install py-spy' (or 'pipx install py-spy'). Without it,\n dtlaunch reads Python stacks through faulthandler; eu-stack (elfutils,\n suggested) reads native ones.")
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_SUGGESTS "elfutils")
set(CPACK_COMPONENT_TRAINER_DESCRIPTION "dtl-train, dtlaunch's libtorch reference DDP worker (GPT-2-style model).")
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
include(CPack)
