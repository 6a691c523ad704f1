print("fanfare")
