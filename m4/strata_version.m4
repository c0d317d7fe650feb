# SPDX-License-Identifier: MIT
# STRATA_VERSION_SPLIT: AC_INIT's version, MAJOR.MINOR.PATCH, in its three parts for include/strata/version.h.in
# (STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR, STRATA_VERSION_PATCH); autoconf stops on a version of another form.
AC_DEFUN([STRATA_VERSION_SPLIT], [
  m4_bmatch(m4_defn([AC_PACKAGE_VERSION]), [^[0-9]+\.[0-9]+\.[0-9]+$], [],
    [m4_fatal([AC_INIT's version ']m4_defn([AC_PACKAGE_VERSION])[' is not MAJOR.MINOR.PATCH])])
  AC_SUBST([STRATA_VERSION_MAJOR], [m4_bregexp(m4_defn([AC_PACKAGE_VERSION]), [^\([0-9]+\)\.], [\1])])
  AC_SUBST([STRATA_VERSION_MINOR], [m4_bregexp(m4_defn([AC_PACKAGE_VERSION]), [^[0-9]+\.\([0-9]+\)\.], [\1])])
  AC_SUBST([STRATA_VERSION_PATCH], [m4_bregexp(m4_defn([AC_PACKAGE_VERSION]), [\.\([0-9]+\)$], [\1])])
])
