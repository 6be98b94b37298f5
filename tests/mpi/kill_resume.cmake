# Kills one rank mid-sweep and checks that re-running the same command resumes and ends with the
# same content as an uninterrupted run. Run by ctest as
#   cmake -DREPLAY=... -DMPIEXEC=... -DTRACE_DIR=... -DWORK=... -P kill_resume.cmake
file(MAKE_DIRECTORY ${WORK})
file(REMOVE ${WORK}/full.h5 ${WORK}/full.h5.journal ${WORK}/killed.h5 ${WORK}/killed.h5.journal)
execute_process(COMMAND ${REPLAY} generate --model lublin --types both --jobs 6000 --seed 21
                        --req-time factor -q -o ${WORK}/trace.swf RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generate failed: ${rc}")
endif()
set(ARGS sweep --trace ${WORK}/trace.swf --policy fcfs,sjf,multifactor --backfill easy,conservative
         --windows 8x1500 --seed 4 --json --no-progress)
set(MPI ${MPIEXEC} --oversubscribe --allow-run-as-root -n 2)
execute_process(COMMAND ${MPI} ${REPLAY} ${ARGS} --out ${WORK}/full.h5
                OUTPUT_VARIABLE full ERROR_VARIABLE full_err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "uninterrupted sweep failed (${rc}):\n${full_err}")
endif()
# Rank 1 raises SIGKILL after computing its 3rd task; mpirun then stops the job.
execute_process(COMMAND ${CMAKE_COMMAND} -E env MLPRIO_SWEEP_TEST_KILL_RANK=1
                        MLPRIO_SWEEP_TEST_KILL_AFTER=3 ${MPI} -x MLPRIO_SWEEP_TEST_KILL_RANK
                        -x MLPRIO_SWEEP_TEST_KILL_AFTER ${REPLAY} ${ARGS} --out ${WORK}/killed.h5
                OUTPUT_VARIABLE killed ERROR_VARIABLE killed_err RESULT_VARIABLE rc)
message(STATUS "killed run exit ${rc}; its stderr:\n${killed_err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the run with a killed rank reported success")
endif()
if(EXISTS ${WORK}/killed.h5)
  message(FATAL_ERROR "a killed sweep left an output file that looks complete")
endif()
execute_process(COMMAND ${MPI} ${REPLAY} ${ARGS} --out ${WORK}/killed.h5
                OUTPUT_VARIABLE resumed ERROR_VARIABLE resumed_err RESULT_VARIABLE rc)
message(STATUS "resumed run exit ${rc}; its stderr:\n${resumed_err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the resumed sweep failed")
endif()
if(NOT resumed_err MATCHES "resuming from .* tasks already recorded")
  message(FATAL_ERROR "the second run did not resume from the journal")
endif()
if(NOT resumed_err MATCHES "was running on rank 1 when the previous run stopped")
  message(FATAL_ERROR "the task lost with the killed rank was not named")
endif()
if(NOT full STREQUAL resumed)
  message(FATAL_ERROR "resumed content differs from an uninterrupted run:\n${full}\n---\n${resumed}")
endif()
# --per-job on top of the finished journal: every summary comes from the journal, the per-job
# tables are recomputed on both ranks and must reproduce the journaled summaries.
execute_process(COMMAND ${MPI} ${REPLAY} ${ARGS} --per-job --out ${WORK}/killed.h5
                OUTPUT_VARIABLE detail ERROR_VARIABLE detail_err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the --per-job resume failed (${rc}):\n${detail_err}")
endif()
if(NOT full STREQUAL detail)
  message(FATAL_ERROR "the --per-job resume changed the content:\n${full}\n---\n${detail}")
endif()
message(STATUS "kill + resume gave the same content as an uninterrupted run")
