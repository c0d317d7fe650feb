# SPDX-License-Identifier: MIT
# STRATA_CHECK_MPI: MPI (OpenMPI) for jobs over several processes and nodes, optional.
# --with-mpi[=yes|no|auto]: auto (the default) turns it on when found, yes makes its absence an
# error, no leaves it out. Found through pkg-config (ompi-c, then mpi), then `mpicc --showme:compile`
# and `--showme:link` (MPICC names another wrapper); MPI_CFLAGS / MPI_LIBS override both. Defines
# STRATA_HAVE_MPI and the conditional HAVE_MPI; only libstrata links MPI, and only when it is on.
AC_DEFUN([STRATA_CHECK_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi@<:@=yes|no|auto@:>@], [MPI (OpenMPI) for jobs over several processes: yes requires it, auto uses it when found @<:@default=auto@:>@])],
    [], [with_mpi=auto])
  AC_ARG_VAR([MPI_CFLAGS], [C compiler flags for MPI])
  AC_ARG_VAR([MPI_LIBS], [linker flags for MPI])
  AC_ARG_VAR([MPICC], [the MPI compiler wrapper asked for flags when pkg-config knows no MPI (default mpicc)])
  AC_ARG_VAR([MPIRUN], [the launcher the tests run under (default mpirun)])
  strata_mpi_happy=no
  strata_mpi_why="disabled (--without-mpi)"
  AS_CASE([$with_mpi], [yes|no|auto], [], [AC_MSG_ERROR([--with-mpi takes yes, no or auto, not '$with_mpi'])])
  AS_IF([test "x$with_mpi" != xno], [
    strata_mpi_why=""
    strata_mpi_how="MPI_CFLAGS/MPI_LIBS"
    AS_IF([test "x$MPI_LIBS" = x], [
      strata_mpi_how="pkg-config ompi-c"
      PKG_CHECK_MODULES([MPI], [ompi-c], [], [
        strata_mpi_how="pkg-config mpi"
        PKG_CHECK_MODULES([MPI], [mpi], [], [
          AS_IF([test "x$MPICC" = x], [MPICC=mpicc])
          strata_mpi_how="$MPICC --showme"
          AC_MSG_CHECKING([for MPI flags from $MPICC --showme])
          AS_IF([strata_mpi_c=`$MPICC --showme:compile 2>/dev/null` && strata_mpi_l=`$MPICC --showme:link 2>/dev/null`],
            [MPI_CFLAGS=$strata_mpi_c; MPI_LIBS=$strata_mpi_l; AC_MSG_RESULT([$MPI_LIBS])],
            [AC_MSG_RESULT([no]); strata_mpi_why="no ompi-c/mpi pkg-config module and no working $MPICC --showme"])])])])
    AS_IF([test "x$strata_mpi_why" = x], [
      strata_save_CPPFLAGS=$CPPFLAGS; strata_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $MPI_CFLAGS"; LIBS="$MPI_LIBS $LIBS"
      AC_CHECK_HEADER([mpi.h], [
        AC_CHECK_FUNC([MPI_Init_thread], [strata_mpi_happy=yes],
          [strata_mpi_why="MPI_Init_thread not found in $MPI_LIBS"])],
        [strata_mpi_why="mpi.h not found (install libopenmpi-dev)"])
      CPPFLAGS=$strata_save_CPPFLAGS; LIBS=$strata_save_LIBS])
    AS_IF([test "x$strata_mpi_happy" != xyes && test "x$with_mpi" = xyes],
      [AC_MSG_ERROR([--with-mpi given but $strata_mpi_why])])])
  AS_IF([test "x$MPIRUN" = x], [MPIRUN=mpirun])
  AS_IF([test "x$strata_mpi_happy" = xyes],
    [AC_DEFINE([STRATA_HAVE_MPI], [1], [Define to 1 when libstrata is built with MPI.])
     AC_PATH_PROG([STRATA_MPIRUN_PATH], [$MPIRUN], [])],
    [MPI_CFLAGS=""; MPI_LIBS=""])
  AC_SUBST([MPIRUN])
  AM_CONDITIONAL([HAVE_MPI], [test "x$strata_mpi_happy" = xyes])
])
