# import_lib.sh - sourced by test_import.sh and test_imagefolder.sh ($CLI set; cwd the work
# folder): fail MESSAGE counts a failure; expect CODE PATTERN -- ARGS... runs `ddptrain data
# ARGS -o out.h5` and wants exit CODE, and for a failure one stderr line matching PATTERN with
# no out.h5 or out.h5.tmp left.
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

expect() {
    local code=$1 pat=$2
    shift 3
    rm -f out.h5
    "${CLI:?}" data "$@" -o out.h5 >stdout 2>stderr
    local rc=$?
    if [ "$rc" != "$code" ]; then
        fail "data $* exited $rc, expected $code: $(cat stderr)"
    elif [ "$code" != 0 ]; then
        if [ "$(wc -l <stderr)" != 1 ] || ! grep -q -- "$pat" stderr; then
            fail "data $*: stderr is not one line matching '$pat': $(cat stderr)"
        elif [ -e out.h5 ] || [ -e out.h5.tmp ]; then
            fail "data $*: left out.h5 or out.h5.tmp behind"
        else
            echo "ok   exit $rc  $(cat stderr)"
        fi
    fi
}
