"""Front ends: each translates its platform's events into calls on `bot.conversations` and
shows a turn's events; none decides who may do what.

    progress     a turn's events folded into a `TurnView` (what it is doing, how its answer
                 ends), and a `Pacer` for edits
    turn_reply   one turn's reply on a chat platform (progress message, approvals, answer),
                 written once; each platform supplies its API calls
    markup       output made harmless, code fenced, long text split
    file_hosts   where attached files may be downloaded from
    on_discord/  Discord (discord.py): client, commands, approval, reply, render
    on_slack/    Slack (slack_bolt): app, commands, buttons, approval, modals, reply, render
    console      `cellmate chat`, with `console_reply` printing a turn
"""
