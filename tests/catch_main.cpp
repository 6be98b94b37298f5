// The one Catch2 main shared by the unit-test binaries (MPI tests have their own).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
