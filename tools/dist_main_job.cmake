# The distributed main job (ckfmt-dist-main-job): N ranks save a sharded
# transformer + AdamW state into one flattened file, verify it and resume it
# on a different world size; --bench measures save throughput against the
# raw disk and the writer's peak RSS against its budget.
# tools/CMakeLists.txt includes this file. Needs MPI.
if(MPI_CXX_FOUND)
  add_executable(ckfmt-dist-main-job ${CMAKE_CURRENT_LIST_DIR}/dist_main_job.cc)
  target_link_libraries(ckfmt-dist-main-job PRIVATE ckfmt_engine MPI::MPI_CXX)
endif()
