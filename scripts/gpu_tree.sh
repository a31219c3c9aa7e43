#!/usr/bin/env bash
# Leave the committed results/ out of what a device call sends, and take them back afterwards.
#
#   bash scripts/gpu_tree.sh off   before the call: a branch gpu-check-tree, one commit on top of the
#                               current one, on which results/ is untracked and ignored; its files
#                               stay on disk (a grid running in the background writes on)
#   bash scripts/gpu_tree.sh on    after it: back where you were, results/ tracked again, the branch
#                               deleted. Changes made to results/ meanwhile are kept: new files stay,
#                               and edited or deleted tracked files stay edited or deleted
#
# A device call sends the tracked files and the untracked ones git does not ignore (64 MiB at most);
# the committed results (about 500 MB of records and predictions) are neither on gpu-check-tree.
set -uo pipefail
BRANCH=gpu-check-tree
FROM_FILE="$(git rev-parse --git-dir)/gpu-check-from"        # where 'off' was run: a branch or a commit
EXCLUDE="$(git rev-parse --git-common-dir)/info/exclude"
die() { echo "gpu_tree.sh: $*" >&2; exit 2; }
back_to() {  # switch to a branch name or, detached, to a commit
    if git show-ref -q --verify "refs/heads/$1"; then git switch -q "$1"; else git switch -q --detach "$1"; fi
}

off() {
    git diff --quiet && git diff --cached --quiet || die "commit or stash your changes first"
    if git show-ref -q --verify "refs/heads/$BRANCH" || [[ -e $FROM_FILE ]]; then
        die "$BRANCH is already there: run 'bash scripts/gpu_tree.sh on' first"
    fi
    local from
    from=$(git symbolic-ref -q --short HEAD || git rev-parse HEAD)
    mkdir -p "$(dirname "$EXCLUDE")" && touch "$EXCLUDE" || die "cannot write $EXCLUDE"
    git switch -q -c "$BRANCH" || die "cannot create $BRANCH"
    if ! { git rm -r -q --cached results && git commit -q --no-verify -m "gpu check: results/ left out of what travels"; }; then
        git reset -q && back_to "$from" && git branch -q -D "$BRANCH"
        die "could not commit the tree without results/; nothing changed"
    fi
    echo "$from" > "$FROM_FILE"
    grep -qx /results/ "$EXCLUDE" || echo /results/ >> "$EXCLUDE"
    echo "on $BRANCH (from $from); what travels (tracked + untracked, not ignored), MiB:"
    { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cm --files0-from=- | tail -1
}

on() {
    [[ "$(git symbolic-ref -q --short HEAD)" == "$BRANCH" && -f $FROM_FILE ]] || die "not on $BRANCH (made by 'off')"
    local from keep
    from=$(cat "$FROM_FILE")
    keep=$(mktemp -d) || die "no temporary folder"
    # switching back rewrites the tracked files of results/ from the commit: keep what changed meanwhile
    GIT_INDEX_FILE="$keep/index" git read-tree "$from" || die "cannot read $from"
    GIT_INDEX_FILE="$keep/index" git diff --name-only -z --diff-filter=M -- results > "$keep/edited"
    GIT_INDEX_FILE="$keep/index" git diff --name-only -z --diff-filter=D -- results > "$keep/deleted"
    tar -cf "$keep/edited.tar" --null -T "$keep/edited" || die "cannot keep the edited files; nothing changed"
    back_to "$from" || die "cannot switch back to $from; still on $BRANCH"  # while results/ is still ignored
    tar -xf "$keep/edited.tar" && xargs -0 -r rm -f < "$keep/deleted"
    sed -i '\#^/results/$#d' "$EXCLUDE"
    git branch -q -D "$BRANCH" && rm -f "$FROM_FILE" && rm -rf "$keep"
    echo "back on $from; results/ tracked again"
    git status --short | head -5
}

case "${1:-}" in
    off) off ;;
    on) on ;;
    *) die "usage: bash scripts/gpu_tree.sh off|on" ;;
esac
