#!/bin/sh
# Put the corpus fetched at build time into the data volume (once), then run the command.
set -e
if [ -f /opt/tinygpt/holmes.txt ] && [ ! -f "$TINYGPT_HOME/datasets/holmes.txt" ]; then
    mkdir -p "$TINYGPT_HOME/datasets"
    cp /opt/tinygpt/holmes.txt "$TINYGPT_HOME/datasets/holmes.txt"
fi
exec "$@"
