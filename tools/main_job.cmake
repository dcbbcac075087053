# The README's "main job": an end-to-end save / verify / inspect / load of a
# realistic training state. tools/CMakeLists.txt includes this file.
add_executable(ckfmt-main-job ${CMAKE_CURRENT_SOURCE_DIR}/main_job.cc)
target_link_libraries(ckfmt-main-job PRIVATE ckfmt_engine)
target_include_directories(ckfmt-main-job PRIVATE ${PROJECT_SOURCE_DIR}/bench)  # realistic_values.h
# It runs `ckfmt verify` and `ckfmt inspect` from its own directory.
add_dependencies(ckfmt-main-job ckfmt)
